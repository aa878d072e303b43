"""Facts about one worker and the XLA runtime it needs: pure functions of options and environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional


class LaunchRefused(Exception):
    """The launch cannot go ahead as configured; the message says why and what is accepted."""


@dataclass(frozen=True)
class WorkerIdentity:
    """Where this worker sits in the job, from the standard torchrun / Kubernetes variables."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "WorkerIdentity":
        def number(name: str, default: int) -> int:
            text = env.get(name, "")
            try:
                return int(text) if text.strip() else default
            except ValueError:
                raise LaunchRefused(f"{name}={text!r} is not an integer") from None

        return cls(
            rank=number("RANK", 0),
            local_rank=number("LOCAL_RANK", 0),
            world_size=number("WORLD_SIZE", 1),
            local_world_size=number("LOCAL_WORLD_SIZE", 1),
            node_rank=number("GROUP_RANK", number("NODE_RANK", 0)),
        )


def visible_gpu_count() -> int:
    """GPUs torch can see (0 on a machine without a driver)."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # no torch, or a CUDA build without a driver
        return 0


def resolve_xla_device(requested: str, env: Mapping[str, str], gpu_count: Optional[int] = None) -> str:
    """The PJRT device a worker uses: an explicit choice, else PJRT_DEVICE, else CUDA if a GPU is visible."""
    if requested and requested != "auto":
        return requested
    if env.get("PJRT_DEVICE"):
        return env["PJRT_DEVICE"].upper()
    count = visible_gpu_count() if gpu_count is None else gpu_count
    return "CUDA" if count > 0 else "CPU"


def cpu_multi_worker_message(world_size: int) -> str:
    return (
        f"{world_size} workers on PJRT_DEVICE=CPU: torch-xla's CPU runtime has no cross-process collectives, "
        f"so every worker would train its own unsynchronised copy of the model (xm.optimizer_step and "
        f"xm.all_reduce do nothing across processes)."
    )


def check_cpu_multi_worker(device: str, world_size: int, policy: str) -> Optional[str]:
    """Refuse several XLA:CPU workers unless the user asked for unsynchronised replicas.

    Returns the warning to print loudly when the user did ask; raises LaunchRefused otherwise.
    """
    if device != "CPU" or world_size <= 1:
        return None
    if policy == "unsynchronized":
        return (
            "WARNING: " + cpu_multi_worker_message(world_size)
            + " Running anyway because cpu-multi-worker=unsynchronized was requested:"
            " the replicas' weights WILL diverge. Use this to test a launch, never to train a model."
        )
    raise LaunchRefused(
        cpu_multi_worker_message(world_size)
        + " Accepted instead: GPUs (PJRT_DEVICE=CUDA, one worker per GPU); one worker"
        " (sagemaker_pytorch_xla_multi_worker_enabled=false, or --nproc-per-node 1); the compiler off"
        " (sagemaker_training_compiler_enabled=false: plain PyTorch, which can use gloo across processes);"
        " or, to test a launch only, --cpu-multi-worker unsynchronized"
        " (hyperparameter sagemaker_training_compiler_cpu_multi_worker=\"unsynchronized\")."
    )


# Debug artefacts that torch-xla writes to one fixed path: with several workers each needs its own file.
PER_RANK_FILE_VARIABLES = ("XLA_SAVE_TENSORS_FILE", "XLA_METRICS_FILE", "PT_XLA_DEBUG_FILE")


def xla_runtime_env(device: str, identity: WorkerIdentity, env: Mapping[str, str]) -> dict[str, str]:
    """Variables this worker's own process needs before torch_xla is imported.

    torch-xla reads its configuration from the process environment at import time, so the worker sets
    these in its own `os.environ` (they also reach any process the script starts, which is what the
    script would expect).
    """
    updates = {"PJRT_DEVICE": device}
    # The PJRT GPU client reads PJRT_LOCAL_PROCESS_RANK (some builds do not fall back to LOCAL_RANK).
    updates.setdefault("PJRT_LOCAL_PROCESS_RANK", env.get("PJRT_LOCAL_PROCESS_RANK", str(identity.local_rank)))
    if identity.world_size > 1:
        updates["PJRT_LOCAL_PROCESS_COUNT"] = env.get("PJRT_LOCAL_PROCESS_COUNT", str(identity.local_world_size))
        for name in PER_RANK_FILE_VARIABLES:
            path = env.get(name)
            if path and not path.endswith(f".rank{identity.rank}"):
                updates[name] = f"{path}.rank{identity.rank}"
    return updates

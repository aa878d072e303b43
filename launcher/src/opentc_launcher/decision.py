"""The one place where a launch's runtime is decided: which PJRT device the workers use, and whether several
workers may run on it.

The outermost launcher decides and passes the decision down as worker options (`--xla-device CUDA`,
`--cpu-multi-worker ...`): the toolkit's launch plan for SageMaker jobs, `opentc-run` on its own, or
`opentc-worker` on its own when started by some other launcher with `--xla-device auto`. Deciding again on
decided options returns them unchanged, so a launcher that is handed a decision applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .options import XLA_DEVICES, WorkerOptions


class LaunchRefused(Exception):
    """The launch cannot go ahead as configured; the message says why and what is accepted."""


def visible_gpu_count() -> int:
    """GPUs this process can see, counted through NVML without creating a CUDA context (0 without a driver)."""
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # no torch, or a CUDA build without a driver
        return 0


def decide_xla_device(requested: str, env: Mapping[str, str], gpu_count: int) -> str:
    """The PJRT device: an explicit choice, else PJRT_DEVICE, else CUDA when a GPU is visible, else CPU."""
    device = requested if requested != "auto" else env.get("PJRT_DEVICE", "").strip().upper() or "auto"
    if device == "auto":
        return "CUDA" if gpu_count > 0 else "CPU"
    if device not in XLA_DEVICES:
        raise LaunchRefused(f"PJRT_DEVICE={env.get('PJRT_DEVICE')!r} is not accepted: use CUDA, CPU or TPU, or "
                            f"leave it unset to use the GPUs when there are any, else the CPU.")
    if device == "CUDA" and gpu_count == 0:
        raise LaunchRefused(
            "no GPU visible: PJRT_DEVICE=CUDA asks for XLA:CUDA, but this machine (or container) shows no GPU "
            "(nvidia-smi and NVML find none). Run on a GPU instance type, or locally with `docker run --gpus all` "
            "and the NVIDIA container toolkit; or leave PJRT_DEVICE unset to train on XLA:CPU.")
    return device


def cpu_multi_worker_message(world_size: int) -> str:
    return (
        f"{world_size} workers on PJRT_DEVICE=CPU: torch-xla's CPU runtime has no cross-process collectives, "
        f"so every worker would train its own unsynchronised copy of the model (xm.optimizer_step and "
        f"xm.all_reduce do nothing across processes)."
    )


def unsynchronized_warning(options: WorkerOptions, world_size: int) -> str | None:
    """The warning every process prints when several XLA:CPU workers run as unsynchronised replicas."""
    if options.runtime != "xla" or options.xla_device != "CPU" or world_size <= 1:
        return None
    return ("WARNING: " + cpu_multi_worker_message(world_size)
            + " Running anyway because cpu-multi-worker=unsynchronized was requested:"
            " the replicas' weights WILL diverge. Use this to test a launch, never to train a model.")


def decide(options: WorkerOptions, world_size: int, env: Mapping[str, str], gpu_count: int) -> WorkerOptions:
    """The options every worker of a launch of `world_size` processes runs with: the device decided, and
    several XLA:CPU workers refused unless unsynchronised replicas were asked for (raises LaunchRefused)."""
    if options.runtime != "xla":
        return options
    device = decide_xla_device(options.xla_device, env, gpu_count)
    if device == "CPU" and world_size > 1 and options.cpu_multi_worker != "unsynchronized":
        raise LaunchRefused(
            cpu_multi_worker_message(world_size)
            + " Accepted instead: GPUs (PJRT_DEVICE=CUDA, one worker per GPU); one worker"
            " (sagemaker_pytorch_xla_multi_worker_enabled=false, or --nproc-per-node 1); the compiler off"
            " (sagemaker_training_compiler_enabled=false: plain PyTorch, which can use gloo across processes);"
            " or, to test a launch only, --cpu-multi-worker unsynchronized"
            " (hyperparameter sagemaker_training_compiler_cpu_multi_worker=\"unsynchronized\")."
        )
    return replace(options, xla_device=device)

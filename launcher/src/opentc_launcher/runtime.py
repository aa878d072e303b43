"""Facts about one worker and the variables its XLA runtime needs: pure functions of options and environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .env_values import number_from_env
from .options import WorkerOptions


@dataclass(frozen=True)
class WorkerIdentity:
    """Where this worker sits in the job, from the standard torchrun / Kubernetes variables."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerIdentity:
        """Raises BadEnvironmentValue when one of the variables is not a whole number."""
        def number(name: str, default: int, minimum: int = 0) -> int:
            return number_from_env(env, name, int, default, minimum)

        return cls(
            rank=number("RANK", 0),
            local_rank=number("LOCAL_RANK", 0),
            world_size=number("WORLD_SIZE", 1, minimum=1),
            local_world_size=number("LOCAL_WORLD_SIZE", 1, minimum=1),
            node_rank=number("GROUP_RANK", number("NODE_RANK", 0)),
        )


# Debug artefacts that torch-xla writes to one fixed path: with several workers each needs its own file.
PER_RANK_FILE_VARIABLES = ("XLA_SAVE_TENSORS_FILE", "XLA_METRICS_FILE", "PT_XLA_DEBUG_FILE")


def xla_runtime_env(options: WorkerOptions, identity: WorkerIdentity, env: Mapping[str, str]) -> dict[str, str]:
    """Variables this worker's own process needs before torch_xla is imported, for the device the launch
    decided (`options.xla_device`).

    torch-xla reads its configuration from the process environment at import time, so the worker sets
    these in its own `os.environ` (they also reach any process the script starts, such as the children of
    `torch_xla.launch`, which is what the script expects).
    """
    updates = {"PJRT_DEVICE": options.xla_device}
    # The PJRT GPU client reads PJRT_LOCAL_PROCESS_RANK (some builds do not fall back to LOCAL_RANK).
    updates["PJRT_LOCAL_PROCESS_RANK"] = env.get("PJRT_LOCAL_PROCESS_RANK", str(identity.local_rank))
    if identity.world_size > 1:
        updates["PJRT_LOCAL_PROCESS_COUNT"] = env.get("PJRT_LOCAL_PROCESS_COUNT", str(identity.local_world_size))
        for name in PER_RANK_FILE_VARIABLES:
            path = env.get(name)
            if path and not path.endswith(f".rank{identity.rank}"):
                updates[name] = f"{path}.rank{identity.rank}"
    return updates

"""Facts about one worker: where it sits in the job, read from the standard variables. Pure functions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .env_values import number_from_env


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


def per_rank_files(names: Iterable[str], identity: WorkerIdentity, env: Mapping[str, str]) -> dict[str, str]:
    """Variables naming one file that every process would write (a debug log): with several workers, each gets
    its own, `<path>.rank<N>`."""
    if identity.world_size <= 1:
        return {}
    updates = {}
    for name in names:
        path = env.get(name)
        if path and not path.endswith(f".rank{identity.rank}"):
            updates[name] = f"{path}.rank{identity.rank}"
    return updates

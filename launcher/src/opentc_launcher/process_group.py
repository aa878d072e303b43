"""Whether the worker was in a torch.distributed process group, looked at without changing anything: at its first
optimizer step (a script that forms one does so before it trains, and may destroy it before it ends) and when the
script ends. Several workers that trained without one each trained their own copy (the job summary says so)."""

from __future__ import annotations

import sys
from typing import TypedDict


class ProcessGroupFigures(TypedDict):
    backend: str
    world_size: int


def current_process_group() -> ProcessGroupFigures | None:
    """The default process group this process is in now, or None (torch.distributed never imported, or no group)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
        return ProcessGroupFigures(backend=str(dist.get_backend()), world_size=int(dist.get_world_size()))
    except Exception:  # noqa: BLE001  (a look at the script's state is never a reason to fail it)
        return None


class ProcessGroupWatch:
    """The largest process group seen at the moments `look` is called."""

    def __init__(self) -> None:
        self.seen: ProcessGroupFigures | None = None

    def look(self) -> None:
        now = current_process_group()
        if now is not None and (self.seen is None or now["world_size"] > self.seen["world_size"]):
            self.seen = now

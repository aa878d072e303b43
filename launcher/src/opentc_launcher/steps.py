"""Training steps, counted the same way for every backend: optimizer steps.

torch.optim's global post-step hook sees every optimizer's step (the script's own, the Trainer's, accelerate's,
`xm.optimizer_step`'s), so the count needs no change to the script. Each step's end time is kept: the step
times, and the time to the first step, come from them.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .after_import import when_imported


class StepCounter:
    """Counts optimizer steps and keeps when each ended (time.monotonic()); `on_step(n)` after step n."""

    def __init__(self, on_step: Callable[[int], None] | None = None):
        self.steps = 0
        self.step_ends = array("d")   # time.monotonic(); 8 bytes a step: a million steps keep 8 MB
        self.started = time.monotonic()
        self._wall_minus_monotonic = time.time() - self.started
        self.on_step = on_step

    def wall_clock(self, monotonic: float) -> float:
        """A time.monotonic() reading as time.time(), to compare with other processes' clocks."""
        return monotonic + self._wall_minus_monotonic

    def install(self) -> StepCounter:
        """Hook torch's optimizers once torch is imported (by the script, or already)."""
        when_imported("torch", self._hook)
        return self

    def _hook(self, _torch: ModuleType) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self._after_step)   # for the life of the process

    def _after_step(self, _optimizer: Any, _args: Any, _kwargs: Any) -> None:
        self.steps += 1
        self.step_ends.append(time.monotonic())
        if self.on_step is not None:
            self.on_step(self.steps)

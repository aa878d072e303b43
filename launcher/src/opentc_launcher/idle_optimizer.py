"""A loud finding when an optimizer steps with no gradient on any parameter it holds: that job trains nothing.

The usual cause is the model-parallel guide's pitfall: the optimizer was created before the model was sharded
(fully_shard), wrapped or moved, and holds parameters the model no longer uses, so every backward pass fills the
gradients of parameters the optimizer never sees. Each optimizer is checked once, at its first step (a step given a
closure, which computes the gradients itself, is left to the next), so a long job pays nothing for it.
"""

from __future__ import annotations

import weakref
from types import ModuleType
from typing import Any

from .after_import import when_imported
from .script_findings import ScriptFindings


def finding(optimizer: Any) -> str | None:
    """Why this optimizer's step trains nothing, or None when some parameter it holds has a gradient."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not params or any(p.grad is not None for p in params):
        return None
    return (f"{type(optimizer).__name__}.step() found no gradient on any of the {len(params)} parameter(s) it "
            f"holds: this job trains nothing. Usually the optimizer was created before the model was sharded "
            f"(fully_shard), wrapped (DDP, accelerate.prepare) or moved to its device, and holds parameters the "
            f"model no longer uses; create it after, from the model's parameters as they are then. (Or backward() "
            f"did not run, or zero_grad() came between it and step().)")


class IdleOptimizerCheck:
    """Checks each optimizer's first step; what it finds goes to `findings`."""

    def __init__(self, findings: ScriptFindings):
        self.findings = findings
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()

    def install(self) -> IdleOptimizerCheck:
        when_imported("torch", self._hook)
        return self

    def _hook(self, _torch: ModuleType) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(self._before_step)   # for the life of the process

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # torch passes step()'s own arguments, self first: a closure is args[1] or kwargs["closure"]
        closure = kwargs.get("closure") if "closure" in kwargs else args[1] if len(args) > 1 else None
        if optimizer in self._checked or closure is not None:
            return
        self._checked.add(optimizer)
        problem = finding(optimizer)
        if problem:
            self.findings.add(problem)

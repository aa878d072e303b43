"""A loud finding when an optimizer steps through the whole job without a gradient on any parameter it holds: the
job trains nothing with it.

The usual cause is the model-parallel guide's pitfall: the optimizer was created before the model was sharded
(fully_shard), wrapped or moved, and holds parameters the model no longer uses, so every backward pass fills the
gradients of parameters the optimizer never sees. The verdict is the whole job's, given when the script ends: an
optimizer whose parameters are frozen for its first steps only (a warm-up that unfreezes the backbone later) trained,
and says nothing. Each optimizer is checked at each step until its first gradient, and no more after that (a step
given a closure, which computes the gradients itself, is not judged); it is named by its class and its place among
the optimizers that stepped, so that two are never taken for one.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .after_import import when_imported
from .script_findings import ScriptFindings


@dataclass
class Stepping:
    """What one optimizer did, kept without a reference to it (an optimizer the script drops is collected)."""

    kind: str          # the class: AdamW
    place: int         # 1 for the first optimizer that stepped, 2 for the second...
    parameters: int = 0
    steps: int = 0     # steps judged (a closure's are not)
    trained: bool = False

    def finding(self, optimizers: int) -> str | None:
        """Why this optimizer trained nothing in the whole job, or None."""
        if self.trained or not self.steps:
            return None
        which = f"{self.kind} (optimizer {self.place} of {optimizers} that stepped)" if optimizers > 1 else self.kind
        return (f"{which} found no gradient on any of the {self.parameters} parameter(s) it holds in any of its "
                f"{self.steps} step(s): this job trained nothing with it. Usually the optimizer was created before "
                f"the model was sharded (fully_shard), wrapped (DDP, accelerate.prepare) or moved to its device, and "
                f"holds parameters the model no longer uses; create it after, from the model's parameters as they are "
                f"then. (Or backward() did not run, or zero_grad() came between it and step().)")


def has_gradient(optimizer: Any) -> tuple[int, bool]:
    """(the parameters the optimizer holds, whether any of them has a gradient now)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return len(params), any(p.grad is not None for p in params)


class IdleOptimizerCheck:
    """Follows every optimizer's steps; `conclude` gives what it found to `findings` when the script has ended."""

    def __init__(self, findings: ScriptFindings):
        self.findings = findings
        self._seen: weakref.WeakKeyDictionary[Any, Stepping] = weakref.WeakKeyDictionary()
        self._all: list[Stepping] = []
        self._concluded = False

    def install(self) -> IdleOptimizerCheck:
        when_imported("torch", self._hook)
        return self

    def _hook(self, _torch: ModuleType) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(self._before_step)   # for the life of the process

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        record = self._seen.get(optimizer)
        if record is None:
            record = Stepping(type(optimizer).__name__, len(self._all) + 1)
            self._seen[optimizer] = record
            self._all.append(record)
        # torch passes step()'s own arguments, self first: a closure is args[1] or kwargs["closure"]
        closure = kwargs.get("closure") if "closure" in kwargs else args[1] if len(args) > 1 else None
        if record.trained or closure is not None:
            return
        record.parameters, record.trained = has_gradient(optimizer)
        record.steps += 1

    def conclude(self) -> None:
        """Once, when the script has ended (however): a finding for each optimizer that never had a gradient."""
        if self._concluded:
            return
        self._concluded = True
        for record in self._all:
            problem = record.finding(len(self._all))
            if problem:
                self.findings.add(problem)

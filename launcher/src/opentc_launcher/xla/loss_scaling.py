"""fp16 loss scaling that decides on the host, seen as it happens: which optimizers an enabled GradScaler stepped
through torch's check of `found_inf` on the host (`.item()`), a read back every optimizer step on XLA.

torch-xla's GradScaler skips that read when the optimizer's step takes `found_inf` (torch_xla.amp.syncfree) or with
`use_zero_grad`; torch's fused optimizers take the scaler themselves (`_step_supports_amp_scaling`). Anything else is
counted here, for the compile report's finding (diagnostics.py).
"""

from __future__ import annotations

import contextlib
import inspect
from collections import Counter
from types import ModuleType
from typing import Any

from ..patching import OBSERVER, LibraryChange, arm_change
from ..replace import replace_once

FIX = ("train in bf16 where the GPU has it (A100, A10G, L4, H100: no loss scaling at all), or scale with "
       "torch_xla.amp.GradScaler and an optimizer from torch_xla.amp.syncfree (Adam, AdamW, SGD), which takes the "
       "overflow check as a tensor and skips the step on the device (a Trainer job: --optim adamw_torch_xla)")


def checks_on_the_host(scaler: Any, optimizer: Any) -> bool:
    """Whether this scaler's step reads the overflow check back to the host before stepping this optimizer."""
    if not scaler.is_enabled() or getattr(scaler, "use_zero_grad", False):
        return False
    if getattr(optimizer, "_step_supports_amp_scaling", False):
        return False
    try:
        return "found_inf" not in inspect.signature(optimizer.step).parameters
    except (TypeError, ValueError):
        return True


class LossScalingWatch:
    def __init__(self) -> None:
        self.host_checks: Counter[str] = Counter()   # optimizer class -> steps its scaler checked on the host

    def install(self) -> LossScalingWatch:
        arm_change(CHANGE, self._hook)
        return self

    def _hook(self, module: ModuleType) -> None:
        scaler_class = module.GradScaler
        original = scaler_class.step

        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            with contextlib.suppress(Exception):   # a measurement is never a reason for a step to fail
                if checks_on_the_host(scaler, optimizer):
                    self.host_checks[type(optimizer).__name__] += 1
            return original(scaler, optimizer, *args, **kwargs)

        replace_once(scaler_class, "step", step)

    def cause(self, optimizer_steps: int) -> str | None:
        """The words for a host-read finding when loss scaling made the reads, else None. `optimizer_steps`: the
        optimizer steps taken (StepCounter's); a scaler skips the step of an overflow, so fewer than it checked means
        that many overflowed, which is said (every one of them: nothing trained)."""
        if not self.host_checks:
            return None
        stepped = ", ".join(f"{name} ({count} steps)" for name, count in self.host_checks.most_common())
        said = (f"fp16 loss scaling reads them: GradScaler.step checked for overflow on the host before stepping "
                f"{stepped}, an optimizer that cannot take that check as a tensor.")
        checked = sum(self.host_checks.values())
        if optimizer_steps < checked:
            skipped = checked - optimizer_steps
            said += (f" It found inf or nan gradients in {'every one' if optimizer_steps == 0 else skipped} of the "
                     f"{checked} and skipped {'them' if skipped > 1 else 'it'}: the optimizer stepped "
                     f"{optimizer_steps} time(s).")
        return said


CHANGE = LibraryChange(
    name="loss-scaling-host-checks-counted", module="torch.amp.grad_scaler",
    target="torch.amp.grad_scaler.GradScaler.step", kind=OBSERVER, backend="xla", apply=LossScalingWatch._hook,
    why="which optimizers fp16 loss scaling stepped through torch's check of found_inf on the host, for the compile "
        "report's host-read finding",
    unpatched="a host-read finding does not say that loss scaling made the reads")

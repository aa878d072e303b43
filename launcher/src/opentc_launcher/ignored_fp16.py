"""A finding when fp16 mixed precision is asked of accelerate (and so of the Trainer) on a CPU, where it does nothing.

accelerate casts to float16 and scales the loss only on GPUs and XLA devices: on a CPU, Accelerator(
mixed_precision="fp16") (the Trainer's --fp16) trains in float32, bit for bit as without it, while the Trainer's log
says "16-bits training: True". Said once per process, when the Accelerator is made.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from .patching import OBSERVER, LibraryChange, arm_change
from .replace import replace_once
from .script_findings import ScriptFindings

FINDING = ("fp16 mixed precision does nothing on a CPU: accelerate (and so the Trainer's --fp16) casts to float16 "
           "and scales the loss only on GPUs and XLA devices, so this job trains in float32, as it would without "
           "fp16, whatever its log says of 16-bits training. Drop fp16 on CPUs (or use bf16, which runs on CPUs), "
           "or run on a GPU instance.")


def ignores_fp16(accelerator: Any) -> bool:
    return (str(getattr(accelerator.state, "mixed_precision", "")) == "fp16"
            and getattr(accelerator.device, "type", None) == "cpu" and not accelerator.native_amp)


class IgnoredFp16Check:
    """Hooks accelerate's Accelerator once it is imported; what it finds goes to `findings`."""

    def __init__(self, findings: ScriptFindings):
        self.findings = findings
        self._said = False

    def install(self) -> IgnoredFp16Check:
        arm_change(CHANGE, self._hook)
        return self

    def _hook(self, module: ModuleType) -> None:
        accelerator_class = module.Accelerator
        original = accelerator_class.__init__
        check = self._check

        def init_checked(accelerator: Any, *args: Any, **kwargs: Any) -> None:
            original(accelerator, *args, **kwargs)
            with contextlib.suppress(Exception):   # an accelerate that names these otherwise: nothing to say
                check(accelerator)

        replace_once(accelerator_class, "__init__", init_checked)

    def _check(self, accelerator: Any) -> None:
        if not self._said and ignores_fp16(accelerator):
            self._said = True
            self.findings.add(FINDING)


CHANGE = LibraryChange(
    name="fp16-on-a-cpu-found", module="accelerate.accelerator", target="accelerate.accelerator.Accelerator.__init__",
    kind=OBSERVER, apply=IgnoredFp16Check._hook,
    why="a finding when fp16 mixed precision is asked of accelerate on a CPU, where it does nothing",
    unpatched="fp16 asked on a CPU is not found")

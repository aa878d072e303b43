"""Host reads: a device tensor's value read back by Python (`.item()`, `bool(t)` in an `if`, `float(t)`, `.tolist()`,
`.cpu()`, `.numpy()`, printing it), counted per optimizer step with the source line of each, on every backend.

On a GPU each read makes the host wait until the device has run everything queued before it: the host's own work
for the next step (the optimizer's bookkeeping, the scheduler, the next batch) then runs in series with the GPU
instead of beside it. A read at a logging step is fine; one on every step is a step that waits.

How: torch.Tensor's reading methods are wrapped once torch is imported (nothing is imported early). A read counts
when the tensor is a plain tensor on the job's device (`cuda` on a GPU, `xla` on XLA); on a CPU job, whose tensors
are all on the host, it counts what a GPU would wait for (what the model, the data on its device and the loss
produce) and leaves out what would be host work there too: torch's optimizers reading their step counters
(`torch/optim`, CPU tensors on a GPU as well), the DataLoader's own work (collation, before the batch is copied to
the device), the compilers' own reads while they compile, and the image's own code. A read inside another (printing
a tensor reads it several times) counts once.

The wrappers are invisible to torch.compile: Dynamo traces a tensor's methods itself and never calls them; their own
frames are marked for Dynamo to leave alone (skipped, not compiled) once it is imported, since the code after a graph
break runs them eagerly inside a compiled function's frames. Each read costs a type and device check, and on a CPU
job a walk up the stack (benchmarks/host_reads_benchmark.py measures it).
"""

from __future__ import annotations

import statistics
import sys
import threading
from array import array
from dataclasses import dataclass, field
from types import FrameType, ModuleType
from typing import Any, TypedDict

from .after_import import when_imported
from .patching import OBSERVER, LibraryChange, arm_change
from .replace import replace_once

READ_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__", "__repr__")
MAX_SITES = 50          # places kept, the first ones seen: a script reads from a handful
LISTED = 5              # in a finding
# A place reading in at least this share of the measured steps reads every step; one that reads every other step
# (a log every 2 steps) does not.
PER_STEP = 0.9

# Where a read's frames are, by path (slashes): the first frame outside torch and this package is its place; the
# innermost frame inside torch says whose read it is.
_TORCH = "/torch/"
_OURS = "/opentc_launcher/"
_OPTIMIZER = "/torch/optim/"
_DATA_LOADING = "/torch/utils/data/"
_COMPILERS = ("/torch/_dynamo/", "/torch/_inductor/", "/torch/_functorch/", "/torch/_subclasses/", "/torch/fx/",
              "/torch/_higher_order_ops/", "/torch/_export/", "/torch/export/")
_SITE_PACKAGES = ("/site-packages/", "/dist-packages/")

# Why a read was not counted (HostReadFigures.left_out's keys).
OPTIMIZER_BOOKKEEPING = "optimizer_bookkeeping"
DATA_LOADING = "data_loading"
COMPILING = "compiling"
THE_IMAGES = "the_images_own"


class ReadSite(TypedDict):
    """A place that read, over the measured steps (all but the first)."""
    where: str       # file:line (function): the path from the package for a library, else as given
    reads: int
    steps: int       # optimizer steps in which it read


class HostReadFigures(TypedDict):
    """What a worker's HostReads saw, for its record and the compile report."""

    counted: str                  # what a read is on this job, in words
    measured_steps: int           # optimizer steps measured: all but the first, which carries the set-up
    reads: int                    # in those steps
    per_step_median: float | None
    steps_with_reads: int
    per_step_sites: list[ReadSite]   # the places that read on (nearly) every measured step
    sites: list[ReadSite]         # every place seen, by reads (at most MAX_SITES)
    left_out: dict[str, int]      # reads not counted, by why (OPTIMIZER_BOOKKEEPING, ...)


@dataclass
class _Site:
    reads: int = 0
    steps: int = 0
    last_step: int = 0


def place(frame: FrameType) -> str:
    """A frame as a reader finds it: `transformers/trainer.py:1894 (_inner_training_loop)` for a library's, the path
    as Python has it for a script's."""
    path = frame.f_code.co_filename.replace("\\", "/")
    for marker in _SITE_PACKAGES:
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{frame.f_lineno} ({frame.f_code.co_name})"


@dataclass
class HostReads:
    """Counts the reads of one worker, step by step (`step_ended` after each optimizer step)."""

    device_type: str                       # what a device tensor is here: "cuda", "xla" or "cpu"
    per_step: array = field(default_factory=lambda: array("I"))   # reads in each step, in order
    pending: int = 0                       # since the last step ended
    sites: dict[str, _Site] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    _local: threading.local = field(default_factory=threading.local)

    def install(self) -> HostReads:
        arm_change(CHANGE, self._wrap_methods)
        return self

    def step_ended(self) -> None:
        self.per_step.append(self.pending)
        self.pending = 0

    # -- the wrappers ------------------------------------------------------------------------------------------
    def _wrap_methods(self, torch: ModuleType) -> None:
        wrappers = []
        for name in READ_METHODS:
            original = getattr(torch.Tensor, name, None)
            if original is None:
                continue
            wrapper = self._reading(name, original, torch.Tensor, torch.nn.Parameter)
            replace_once(torch.Tensor, name, wrapper, key=f"opentc-host-reads.{name}")
            wrappers.append(wrapper)
        when_imported("torch._dynamo", lambda _dynamo: _leave_to_dynamo(torch, wrappers))

    def _reading(self, name: str, original: Any, tensor: type, parameter: type) -> Any:
        local = self._local

        def read(value: Any, *args: Any, **kwargs: Any) -> Any:
            kind = type(value)
            if kind is not tensor and kind is not parameter:
                return original(value, *args, **kwargs)
            device = self.device_type   # is_cuda and is_cpu: cheaper than building a torch.device
            if (not (value.is_cuda if device == "cuda" else value.is_cpu if device == "cpu"
                     else value.device.type == device)) or getattr(local, "inside", False):
                return original(value, *args, **kwargs)
            local.inside = True
            try:
                self._seen(sys._getframe(1))
                return original(value, *args, **kwargs)
            finally:
                local.inside = False

        read.__name__ = read.__qualname__ = name
        read.__doc__ = getattr(original, "__doc__", None)
        return read

    def _seen(self, frame: FrameType | None) -> None:
        """One read, from `frame` (the caller of the tensor's method): counted, or left out with why."""
        innermost = frame.f_code.co_filename.replace("\\", "/") if frame is not None else ""
        if _OURS in innermost:
            self._leave_out(THE_IMAGES)
            return
        if self.device_type == "cpu" and _OPTIMIZER in innermost:
            self._leave_out(OPTIMIZER_BOOKKEEPING)
            return
        site = ""
        while frame is not None:
            path = frame.f_code.co_filename.replace("\\", "/")
            if self.device_type == "cpu" and _DATA_LOADING in path:
                self._leave_out(DATA_LOADING)
                return
            if not site:
                # A compiler's own read is made by its code, inside torch, before any caller's: further out, a
                # compiler's frames are the compiled code's callers (a region's eager part runs under them).
                if any(marker in path for marker in _COMPILERS):
                    self._leave_out(COMPILING)
                    return
                if _TORCH not in path and _OURS not in path:
                    site = place(frame)
                    if self.device_type != "cpu":
                        break   # on a device, a host tensor is never counted: nothing further out changes that
            frame = frame.f_back
        self._count(site or "unknown")

    def _leave_out(self, why: str) -> None:
        self.left_out[why] = self.left_out.get(why, 0) + 1

    def _count(self, where: str) -> None:
        self.pending += 1
        step = len(self.per_step) + 1
        if step == 1:
            return   # the first step carries the set-up before it: counted in its step, not at a place
        found = self.sites.get(where)
        if found is None:
            if len(self.sites) >= MAX_SITES:
                return
            found = self.sites[where] = _Site()
        found.reads += 1
        if found.last_step != step:
            found.steps, found.last_step = found.steps + 1, step

    # -- what was seen -----------------------------------------------------------------------------------------
    def figures(self) -> HostReadFigures:
        measured = list(self.per_step[1:])   # the first step carries the set-up before it
        per_step = [
            ReadSite(where=where, reads=site.reads, steps=site.steps)
            for where, site in self.sites.items()
            if measured and site.steps >= max(2, PER_STEP * len(measured))
        ]
        listed = sorted(self.sites.items(), key=lambda kv: -kv[1].reads)
        return HostReadFigures(
            counted=counted_words(self.device_type),
            measured_steps=len(measured), reads=sum(measured),
            per_step_median=statistics.median(measured) if measured else None,
            steps_with_reads=sum(1 for n in measured if n),
            per_step_sites=sorted(per_step, key=lambda s: -s["reads"]),
            sites=[ReadSite(where=where, reads=site.reads, steps=site.steps) for where, site in listed],
            left_out=dict(self.left_out),
        )


CHANGE = LibraryChange(
    name="host-reads-counted", module="torch", target=f"torch.Tensor.{', '.join(READ_METHODS)}", kind=OBSERVER,
    apply=HostReads._wrap_methods,
    why="each read of a device tensor back to the host, counted per optimizer step with its place (a type and device "
        "check a read)",
    unpatched="host reads are not counted (the compile report and the job summary have no host_reads)")


def counted_words(device_type: str) -> str:
    if device_type == "cpu":
        return ("CPU tensors read back where a GPU job would wait for its GPU (the model's, the data's on the device, "
                "the loss); torch's optimizer bookkeeping, data loading and compiling left out")
    return f"{device_type} tensors read back to the host"


def _leave_to_dynamo(torch: ModuleType, wrappers: list[Any]) -> None:
    """Dynamo compiles the frames a compiled function runs eagerly (after a graph break), these wrappers' among them:
    marked skipped, they run as they are (torch.compiler.disable(recursive=False) marks the code, adds no wrapper)."""
    for wrapper in wrappers:
        try:
            torch.compiler.disable(wrapper, recursive=False)
        except Exception:  # noqa: BLE001  (an older torch: Dynamo may then try the frame, and skip it itself)
            return


HOST_READS_FIX = ("read values back every 10 to 100 steps, not every step (log less often; keep a running sum on "
                  "the device and read it when you log); where the place is a library's, the image's library patches "
                  "remove the reads they know of, unless they were turned off")


def per_step_finding(figures: HostReadFigures) -> str | None:
    """The problem, when some place reads a device tensor back on (nearly) every optimizer step; else None."""
    sites = figures["per_step_sites"]
    if not sites:
        return None
    measured = figures["measured_steps"]
    places = "; ".join(f"{s['where']} ({s['reads']} read(s) in {s['steps']} step(s))" for s in sites[:LISTED])
    median = figures["per_step_median"]
    return (f"a device tensor was read back to the host in {figures['steps_with_reads']} of {measured} optimizer "
            f"steps ({median:g} a step at the median), every step at: {places}. On a GPU each read makes the host "
            f"wait for the device, so the host's work for the next step no longer overlaps the GPU's.")

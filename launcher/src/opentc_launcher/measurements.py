"""What every worker measures for the job summary, whatever the backend, with no change to the script.

- Optimizer steps (the shared StepCounter): when the first ended, and the time between steps once warm
  (median and 90th percentile, the first `warmup` steps left out: compilation happens there).
- Throughput from the batches torch's DataLoaders hand out: each batch's shape gives its samples (the first
  dimension of its first tensor, `input_ids` in a dict) and, only where they are token ids, its tokens (samples x
  the second dimension: a 2-D tensor of int64 or int32, alone, first in a tuple or list, or a mapping's
  `input_ids`). Anything else (uint8 images, a mapping of other names, 3-D ids) counts samples only, and no MFU is
  built from it. Counted in the steady window (after warm-up), so compilation is not in the rate.
  Scripts that do not use a DataLoader have no throughput here (the Trainer's own figure may still be known).
- Peak memory: the backend's (CUDA's allocator, XLA's runtime on a GPU), else the process's peak resident memory.

Written at the end as the worker's record (worker_record.py); the toolkit puts the workers' records together.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import resource
import statistics
import sys
import threading
import time
from array import array
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from .patching import OBSERVER, LibraryChange, arm_change
from .replace import replace_once
from .steps import StepCounter
from .worker_record import Rates, StepTimes

log = logging.getLogger("opentc_launcher")

MAX_BATCHES = 1_000_000


class BatchWatch:
    """When each DataLoader batch was handed out, with its samples and tokens."""

    def __init__(self) -> None:
        self.times = array("d")     # time.monotonic()
        self.samples = array("q")
        self.tokens = array("q")
        self._lock = threading.Lock()

    def install(self) -> BatchWatch:
        global _current
        _current = self
        arm_change(BATCHES_COUNTED)
        return self

    def seen(self, batch: Any) -> None:
        tensor = _first_tensor(batch)
        if tensor is None or tensor.dim() == 0 or len(self.times) >= MAX_BATCHES:
            return
        samples = int(tensor.shape[0])
        ids = _token_ids(tensor, batch)
        with self._lock:
            self.times.append(time.monotonic())
            self.samples.append(samples)
            self.tokens.append(samples * int(tensor.shape[1]) if ids else 0)

    def rates(self, start: float, end: float) -> Rates | None:
        """Samples and tokens per second handed out between two moments (time.monotonic()); None without batches."""
        if end <= start:
            return None
        with self._lock:
            chosen = [i for i, t in enumerate(self.times) if start < t <= end]
            samples = sum(self.samples[i] for i in chosen)
            tokens = sum(self.tokens[i] for i in chosen)
        if not chosen:
            return None
        return Rates(samples_per_second=samples / (end - start),
                     tokens_per_second=tokens / (end - start) if tokens else None)


_current: BatchWatch | None = None


def _first_tensor(batch: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, dict):
        values = [batch["input_ids"]] if "input_ids" in batch else list(batch.values())
    elif isinstance(batch, (list, tuple)):
        values = list(batch)
    else:
        values = [getattr(batch, "input_ids", None)]   # a BatchEncoding-like object
    return next((v for v in values if isinstance(v, torch.Tensor)), None)


def _token_ids(tensor: Any, batch: Any) -> bool:
    """Whether the batch's measured tensor holds token ids: (samples, sequence) of int64 or int32, and where the batch
    is a mapping, its `input_ids` (a mapping of pixel values or labels alone has none)."""
    torch = sys.modules["torch"]
    if tensor.dim() != 2 or tensor.dtype not in (torch.int64, torch.int32):
        return False
    if isinstance(batch, dict):
        return "input_ids" in batch
    return isinstance(batch, (torch.Tensor, list, tuple)) or getattr(batch, "input_ids", None) is tensor


def _hook_dataloaders(_torch: ModuleType) -> None:
    from torch.utils.data import dataloader

    iterator = dataloader._BaseDataLoaderIter
    original = iterator.__next__

    def next_measured(self: Any) -> Any:
        batch = original(self)
        if _current is not None:
            with contextlib.suppress(Exception):   # a measurement is never a reason for a step to fail
                _current.seen(batch)
        return batch

    replace_once(iterator, "__next__", next_measured)


BATCHES_COUNTED = LibraryChange(
    name="batches-counted", module="torch", target="torch.utils.data.dataloader._BaseDataLoaderIter.__next__",
    kind=OBSERVER, apply=_hook_dataloaders,
    why="each batch a DataLoader hands out, with its samples and tokens, for the job summary's throughput",
    unpatched="the job summary has no throughput of its own (the Trainer's may be known)")


def host_peak_memory_mb() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def own_cpu_seconds() -> float:
    """CPU seconds this process has used (user and system), its threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def children_usage() -> tuple[float, float]:
    """(CPU seconds, peak resident MB) of the processes this one started and waited for, theirs included: a script
    that starts its own workers (torch.distributed.launch from inside the entry point) trains there."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def cuda_peak_memory_mb() -> float | None:
    """CUDA's allocator peak on this process's device, when torch is imported and CUDA is in use."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda.max_memory_allocated() / 2**20
    except Exception:  # noqa: BLE001
        return None
    return None


def cuda_device_memory_mb() -> float | None:
    """The memory of this process's CUDA device, when torch is imported and CUDA is in use."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**20
    except Exception:  # noqa: BLE001
        return None
    return None


# A compiled job whose peak is below this share of its GPU's memory leaves most of it unused (Training Compiler's
# guide: a compiled model takes less memory, so raise the batch size until the memory is used); the batch it would
# aim for fills this share.
HEADROOM_SHARE = 0.5
FILLED_SHARE = 0.85


def headroom_finding(peak_mb: float | None, device_mb: float | None) -> str | None:
    """What to say of a compiled job's peak against its GPU's memory, when it left most of it unused; else None.
    Never changes the batch: the learning rate goes with it, which is the user's choice."""
    if not peak_mb or not device_mb or peak_mb >= HEADROOM_SHARE * device_mb:
        return None
    times = int(FILLED_SHARE * device_mb / peak_mb * 10) / 10
    return (f"the GPU's memory was at most {peak_mb / device_mb:.0%} used ({peak_mb:,.0f} MB at the peak of "
            f"{device_mb:,.0f} MB): a batch up to about {times:g}x as large would likely fit (activations grow with "
            f"the batch; the weights and optimizer state do not, so the real room is larger). To fix: Training "
            f"Compiler's own advice for a compiled job, which takes less memory than eager: raise the batch size "
            f"(per_device_train_batch_size) and the learning rate with it, until the peak is about "
            f"{FILLED_SHARE:.0%} of the memory; the image never changes the batch itself.")


def step_statistics(steps: StepCounter, warmup: int, compiled_at: Sequence[float] = ()) -> StepTimes:
    """Seconds between optimizer steps once warm: the first `warmup` steps are left out (all but the first when
    the job had too few), and so are the later steps that compiled a graph (`compiled_at`: time.monotonic() of each
    new graph), unless they are more than a third of the rest: then compiling is the job's steady state, and stays."""
    ends = steps.step_ends
    skip = warmup if len(ends) > warmup + 1 else min(1, len(ends))
    measured = range(max(skip, 1), len(ends))
    compiling = set()
    for moment in compiled_at:
        i = bisect.bisect_left(ends, moment)   # the step whose time (ends[i - 1], ends[i]] holds the moment
        if i in measured:
            compiling.add(i)
    if len(compiling) * 3 > len(measured):
        compiling = set()
    durations = [ends[i] - ends[i - 1] for i in measured if i not in compiling]
    stats = StepTimes(measured_steps=len(durations), warmup_steps=skip, median=None, p90=None,
                      compiling_left_out=len(compiling),
                      slowest_left_out=max((ends[i] - ends[i - 1] for i in compiling), default=None))
    if durations:
        stats["median"] = statistics.median(durations)
        stats["p90"] = statistics.quantiles(durations, n=10, method="inclusive")[-1] if len(durations) > 1 \
            else durations[0]
    return stats

"""What XLA did in one worker, read from torch-xla's metrics, and what the user should change.

Training Compiler's guide asks for static shapes, few explicit evaluations (`.item()`, printing tensors) and ops
XLA can lower; breaking a rule shows up only as a slow job. A `CompileMonitor` follows the counters while the
script runs (warning about recompilation as it happens, and stopping a worker that passes the compilation
limit), `StepActivity` counts what ran between two optimizer steps, and `build_report` turns the counters into
the compile report (compile_report.CompileReport) in the guide's terms. The user's script needs no change.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from .. import exit_codes
from ..compile_report import (
    CACHE_LOAD_FAILURES,
    COMPILATION_LIMIT,
    CPU_FALLBACK,
    HOST_READS,
    RECOMPILATION_WARNING,
    SHAPES_FIX,
    CompileReport,
    CompileTimeline,
    Finding,
    nothing_compiled_finding,
    recompilation_warning,
)
from ..setting_names import setting
from ..steps import StepCounter
from .loss_scaling import FIX as LOSS_SCALING_FIX
from .loss_scaling import LossScalingWatch
from .named_settings import DEBUG_LOG

log = logging.getLogger("opentc_launcher")

# A host read in at least this share of the steps means the script reads a value back every step.
EVALUATIONS_PER_STEP = 0.5
HOST_READ_OPS = ("aten::_local_scalar_dense",)   # .item(), printing a tensor, Python `if tensor:`
NOTHING_OBSERVED = "no XLA execution observed in this process"

EVALUATION_FIX = ("log less often: calling .item() or printing a tensor forces an explicit evaluation that "
                  "breaks the compiled graph; read values back every 10 to 100 steps, not every step. If "
                  f"your code does not, a library does: {setting(DEBUG_LOG)} logs PT_XLA_DEBUG's "
                  "'Execution Analysis' with the Python frame of each evaluation")
FALLBACK_FIX = ("these ops have no XLA lowering and ran on the CPU, copying tensors to the host and back "
                "each time: replace them or move them out of the training step")
NOTHING_COMPILED_FINDING = nothing_compiled_finding(
    "xla",
    "no tensor was put on the XLA device: the script's model and data stayed on the device torch gave it, the CPU "
    "(or a GPU), as with the compiler off",
    "put the model and each batch on the XLA device: device = torch_xla.device() (xm.xla_device() in older "
    "scripts), model.to(device), and each batch's tensors .to(device) (the Trainer and Accelerate do it by "
    "themselves where torch-xla is installed); a script that picks its own device (a 'cuda if available else cpu' "
    "line, Lightning's accelerator='auto') chose another one")


def _counter(name: str) -> int:
    import torch_xla.debug.metrics as met

    return int(met.counter_value(name) or 0)


def _metric(name: str) -> Any:
    import torch_xla.debug.metrics as met

    return met.metric_data(name)


def graphs_compiled() -> int:
    return _counter("UncachedCompile")


def graphs_dispatched() -> int:
    """Graphs handed to the device to run (a sync with work pending, a tensor read back), counted by torch-xla as it
    builds each one, in the thread that asked: the count is final when the call returns. (ExecuteComputation counts
    the same graphs later, when the device gets to them, which a busy machine delays past the next step.)"""
    data = _metric("TensorsGraphSize")
    return int(data[0]) if data else 0


def _host_reads() -> int:
    return sum(_counter(op) for op in HOST_READ_OPS)


class StepActivity:
    """What the script asked of the device between two optimizer steps: how many graphs it dispatched, and whether a
    tensor was read back to the host. Fed by the shared StepCounter after each step, from counts that are final
    when the step ends, so the attribution does not depend on how far the device has got."""

    def __init__(self) -> None:
        self.steps_with_host_reads = 0
        self.executions_per_step: Counter[int] = Counter()
        self._last: tuple[int, int] | None = None

    def after_step(self) -> None:
        now = (graphs_dispatched(), _host_reads())
        # From the second step on: the first one also carries the set-up before it.
        if self._last is not None:
            self.executions_per_step[now[0] - self._last[0]] += 1
            if now[1] > self._last[1]:
                self.steps_with_host_reads += 1
        self._last = now


class StepOrSyncTimelines:
    """New graphs put at optimizer steps, and at syncs beside them, each against the same warm-up: a script that
    takes optimizer steps is judged by them alone (what its syncs compiled before the first one is its warm-up), and
    one that takes none (an evaluation, a script that steps some other way) by its syncs, which its findings then
    name. One unit per timeline: a sync count is never compared with a warm-up of optimizer steps."""

    def __init__(self, warmup_steps: int):
        self.by_step = CompileTimeline(warmup_steps)
        self.by_sync = CompileTimeline(warmup_steps, unit="sync")

    def observe(self, steps: int, syncs: int, compiles: int) -> None:
        self.by_step.observe(steps, compiles)
        self.by_sync.observe(syncs, compiles)

    def chosen(self, steps: int) -> CompileTimeline:
        """The timeline for a process that has taken `steps` optimizer steps."""
        return self.by_step if steps else self.by_sync


class CompileMonitor(threading.Thread):
    """Follows torch-xla's counters while the script runs.

    A sync compiles in the thread that calls it, so `after_sync` (called right after each one) puts every new
    graph at the step it belongs to, and stops the worker at the first graph over the limit. The thread polls
    for the limit only: graphs compiled outside a sync (by `.item()`, say) still count.
    """

    def __init__(self, process: str, warmup_steps: int, max_compilations: int,
                 on_limit: Callable[[int], None], step_counter: StepCounter | None = None,
                 interval: float = 0.25):
        super().__init__(daemon=True, name="opentc-compile-monitor")
        self.process = process
        self.step_counter = step_counter
        self.timelines = StepOrSyncTimelines(warmup_steps)
        self.max_compilations = max_compilations
        self.on_limit = on_limit
        self.interval = interval
        self._stop_event = threading.Event()
        self._next_warning = RECOMPILATION_WARNING
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.check_limit()

    def check_limit(self) -> None:
        compiles = graphs_compiled()
        if self.max_compilations and compiles > self.max_compilations:
            self.on_limit(compiles)

    @property
    def timeline(self) -> CompileTimeline:
        return self.timelines.chosen(self.step_counter.steps if self.step_counter is not None else 0)

    def after_sync(self) -> None:
        with self._lock:
            compiles = graphs_compiled()
            steps = self.step_counter.steps if self.step_counter is not None else 0
            self.timelines.observe(steps, _counter("MarkStep"), compiles)
            timeline = self.timelines.chosen(steps)
            if timeline.late_points >= self._next_warning:
                log.warning("%s", recompilation_warning(self.process, timeline, compiles))
                self._next_warning *= 2
        self.check_limit()

    def stop(self) -> CompileTimeline:
        self._stop_event.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=5)
        self.after_sync()
        return self.timeline


def _findings(timeline: CompileTimeline, fallbacks: dict[str, int], evaluations: int, syncs: int,
              steps: StepCounter | None, activity: StepActivity | None, cache: dict,
              loss_scaling: LossScalingWatch | None) -> list[Finding]:
    found = []
    recompiling = timeline.recompilation_finding()
    if recompiling:
        found.append(recompiling)
    # Loss scaling that reads the overflow check is the cause whichever way the reads are counted: by optimizer
    # step, or by sync when the scaler skipped (nearly) every step (each overflowed).
    cause = loss_scaling.cause(steps.steps if steps is not None else 0) if loss_scaling is not None else None
    because = f" {cause}" if cause else ""
    fix = LOSS_SCALING_FIX if cause else EVALUATION_FIX
    if steps is not None and activity is not None and steps.steps > 1:
        # Between optimizer steps: a read at every logging step is fine, one at (nearly) every step is not.
        measured = steps.steps - 1
        if activity.steps_with_host_reads >= max(2, EVALUATIONS_PER_STEP * measured):
            found.append(Finding(
                f"a tensor was read back to the host (explicit evaluation) in {activity.steps_with_host_reads} "
                f"of {measured} optimizer steps ({evaluations} in all).{because}", fix, HOST_READS))
    elif syncs and evaluations >= max(2, EVALUATIONS_PER_STEP * syncs):
        found.append(Finding(
            f"{evaluations} explicit evaluation(s) (a tensor read back to the host) in {syncs} sync(s).{because}",
            fix, HOST_READS))
    if fallbacks:
        ops = ", ".join(f"{op} x{count}" for op, count in sorted(fallbacks.items(), key=lambda kv: -kv[1]))
        found.append(Finding(f"CPU fallback ops: {ops}.", FALLBACK_FIX, CPU_FALLBACK))
    if cache.get("load_failures"):
        failures = cache["load_failures"]
        entries = "persistent cache entry" if failures == 1 else "persistent cache entries"
        found.append(Finding(
            f"{failures} {entries} could not be loaded (corrupt, or written by another torch-xla build); they "
            f"were compiled again.", "nothing needed: the entries were rewritten; delete the cache folder if "
            "this repeats", CACHE_LOAD_FAILURES))
    return found


def build_report(process: str, rank: int, world_size: int, device: str, exit_code: int | None,
                 timeline: CompileTimeline, cache: dict, steps: StepCounter | None = None,
                 activity: StepActivity | None = None, loss_scaling: LossScalingWatch | None = None,
                 started_processes: bool = False) -> CompileReport:
    """The report; `started_processes`: the script ran its work in processes it started through torch-xla
    (torch_xla.launch, xmp.spawn), which report for themselves, so that this one compiling nothing is no finding."""
    import torch_xla.debug.metrics as met

    compile_time = _metric("CompileTime")
    per_graph = [round(ns / 1e9, 3) for _, ns in compile_time[2]] if compile_time else []
    total = round(compile_time[1] / 1e9, 3) if compile_time else 0.0
    aten = {name: int(met.counter_value(name)) for name in met.counter_names() if name.startswith("aten::")}
    evaluations = sum(aten.pop(op, 0) for op in HOST_READ_OPS)
    transfers = _metric("TransferFromDeviceTime")
    cache = {**cache, "hits": _counter("PersistentCacheHit"), "misses": _counter("PersistentCacheMiss"),
             "load_failures": _counter("PersistentCacheDeserializeFailure")}
    syncs = _counter("MarkStep")
    executions = _counter("ExecuteComputation")
    findings = _findings(timeline, aten, evaluations, syncs, steps, activity, cache, loss_scaling)
    if exit_code == exit_codes.COMPILATION_LIMIT and not timeline.keeps_recompiling:
        findings.insert(0, Finding(f"the compilation limit stopped this process after {timeline.compiles_seen} "
                                   f"graph(s), before the monitor could tell where they came from.", SHAPES_FIX,
                                   COMPILATION_LIMIT))
    graphs = graphs_compiled()
    nothing_ran = executions == 0 and graphs == 0
    if nothing_ran and not started_processes:
        findings.insert(0, NOTHING_COMPILED_FINDING)
    return CompileReport(
        process=process, rank=rank, world_size=world_size, backend="xla", device=device, exit_code=exit_code,
        optimizer_steps=steps.steps if steps else 0, graphs_compiled=graphs,
        compile_seconds_total=total, compile_seconds_per_graph=per_graph,
        graphs_after_warmup=timeline.after_warmup, steps_with_late_graphs=timeline.late_points,
        warmup_steps=timeline.warmup_steps, steps_with_new_graphs=timeline.steps_with_new_graphs,
        step_unit=timeline.unit, persistent_cache=cache, findings=findings,
        details={
            "syncs": syncs,
            "steps_with_host_reads": activity.steps_with_host_reads if activity else 0,
            "executions_per_step": ({str(k): v for k, v in sorted(activity.executions_per_step.items())}
                                    if activity else {}),
            "in_memory_cache_hits": _counter("CachedCompile"),
            "executions": executions,
            "cpu_fallback_ops": aten,
            "device_to_host_transfers": int(transfers[0]) if transfers else 0,
            "explicit_evaluations": evaluations,
            "loss_scaling_host_checks": dict(loss_scaling.host_checks) if loss_scaling else {},
        },
        activity=f"{executions} execution{'' if executions == 1 else 's'}",
        clean_means="no recompilation, CPU fallback or per-step host read",
        nothing_observed=(f"{NOTHING_OBSERVED} (the processes the script started through torch-xla trained instead; "
                          f"each has its own report)." if nothing_ran and started_processes else ""),
    )

"""What the compiler did in one worker, read from torch-xla's metrics, and what the user should change.

Training Compiler's guide asks for static shapes, few explicit evaluations (`.item()`, printing tensors)
and ops XLA can lower; breaking a rule shows up only as a slow job. A `CompileMonitor` thread watches the
counters while the script runs (warning about recompilation as it happens, and stopping a worker that
passes the compilation limit), and `build_report` turns the counters into a JSON report and a few log
lines in the guide's terms. The user's script needs no change.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from . import exit_codes

log = logging.getLogger("opentc_launcher")

# New graphs after warm-up are worth a warning when they keep appearing: seen at this many different
# steps. A burst at one step is legitimate (the first logging or evaluation step compiles its graphs).
RECOMPILATION_WARNING = 3
# A host read in at least this share of the steps means the script reads a value back every step.
EVALUATIONS_PER_STEP = 0.5
HOST_READ_OPS = ("aten::_local_scalar_dense",)   # .item(), printing a tensor, Python `if tensor:`
NOTHING_OBSERVED = "no XLA execution observed in this process"

SHAPES_FIX = ("keep shapes static: pad every sequence to one fixed length (padding='max_length'), cut text "
              "into fixed-size blocks, and drop the last uneven batch (drop_last=True / dataloader_drop_last)")
EVALUATION_FIX = ("log less often: calling .item() or printing a tensor forces an explicit evaluation that "
                  "breaks the compiled graph; read values back every 10 to 100 steps, not every step. If "
                  "your code does not, a library does: debug mode (sagemaker_training_compiler_debug_mode) "
                  "logs PT_XLA_DEBUG's 'Execution Analysis' with the Python frame of each evaluation")
FALLBACK_FIX = ("these ops have no XLA lowering and ran on the CPU, copying tensors to the host and back "
                "each time: replace them or move them out of the training step")


def _counter(name: str) -> int:
    import torch_xla.debug.metrics as met

    return int(met.counter_value(name) or 0)


def _metric(name: str):
    import torch_xla.debug.metrics as met

    return met.metric_data(name)


def graphs_compiled() -> int:
    return _counter("UncachedCompile")


def _host_reads() -> int:
    return sum(_counter(op) for op in HOST_READ_OPS)


class StepCounter:
    """Counts optimizer steps (torch.optim's global post-step hook, so any script's optimizer counts, the
    Trainer's and `xm.optimizer_step`'s included) and what happened on the device between two of them."""

    def __init__(self):
        self.steps = 0
        self.steps_with_host_reads = 0
        self.executions_per_step: Counter[int] = Counter()
        self._last: tuple[int, int] | None = None

    def install(self) -> StepCounter:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self._after_step)   # for the life of the process
        return self

    def _after_step(self, _optimizer, _args, _kwargs) -> None:
        now = (_counter("ExecuteComputation"), _host_reads())
        # From the second step on: the first one also carries the set-up before it.
        if self._last is not None:
            self.executions_per_step[now[0] - self._last[0]] += 1
            if now[1] > self._last[1]:
                self.steps_with_host_reads += 1
        self._last = now
        self.steps += 1


@dataclass
class CompileTimeline:
    """Compilations seen by the monitor, relative to the training steps (optimizer steps where the script
    has an optimizer, else syncs)."""

    warmup_steps: int
    steps_seen: int = 0
    compiles_seen: int = 0
    after_warmup: int = 0
    late_points: int = 0                  # different steps at which graphs appeared after warm-up
    steps_with_new_graphs: list[int] = field(default_factory=list)

    def observe(self, steps: int, compiles: int) -> None:
        new = compiles - self.compiles_seen
        if new > 0 and steps > self.warmup_steps:
            self.after_warmup += new
            if not self.steps_with_new_graphs or self.steps_with_new_graphs[-1] != steps:
                self.late_points += 1
                if len(self.steps_with_new_graphs) < 50:
                    self.steps_with_new_graphs.append(steps)
        self.steps_seen, self.compiles_seen = steps, max(compiles, self.compiles_seen)

    @property
    def keeps_recompiling(self) -> bool:
        return self.late_points >= RECOMPILATION_WARNING


class CompileMonitor(threading.Thread):
    """Watches torch-xla's counters while the script runs.

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
        self.timeline = CompileTimeline(warmup_steps)
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

    def after_sync(self) -> None:
        with self._lock:
            compiles = graphs_compiled()
            steps = self.step_counter.steps if self.step_counter is not None else 0
            self.timeline.observe(steps or _counter("MarkStep"), compiles)
            if self.timeline.late_points >= self._next_warning:
                log.warning(
                    "%s: new graphs keep being compiled after warm-up (%d at %d different steps, the last "
                    "at step %d; %d graphs in all): input shapes are probably changing between steps. "
                    "To fix: %s.", self.process, self.timeline.after_warmup, self.timeline.late_points,
                    self.timeline.steps_seen, compiles, SHAPES_FIX)
                self._next_warning *= 2
        self.check_limit()

    def stop(self) -> CompileTimeline:
        self._stop_event.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=5)
        self.after_sync()
        return self.timeline


@dataclass
class Finding:
    problem: str
    fix: str


@dataclass
class CompileReport:
    process: str                    # rank<N>, or rank<N>-spawned<K> for a process the script started
    rank: int
    world_size: int
    device: str
    exit_code: int | None
    optimizer_steps: int            # optimizer.step() calls
    syncs: int                      # torch_xla.sync() / xm.mark_step(), the script's or a library's
    steps_with_host_reads: int      # optimizer steps during which a tensor was read back to the host
    executions_per_step: dict[str, int]   # graphs run between two optimizer steps -> how many steps
    graphs_compiled: int
    compile_seconds_total: float
    compile_seconds_per_graph: list[float]
    graphs_after_warmup: int
    steps_with_late_graphs: int
    warmup_steps: int
    steps_with_new_graphs: list[int]
    in_memory_cache_hits: int
    executions: int
    persistent_cache: dict
    cpu_fallback_ops: dict[str, int]
    device_to_host_transfers: int
    explicit_evaluations: int
    findings: list[Finding]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @property
    def observed_nothing(self) -> bool:
        return self.executions == 0 and self.graphs_compiled == 0

    def summary_lines(self) -> list[str]:
        who = self.process
        if self.observed_nothing and not self.findings:
            return [f"{who}: compile report: {NOTHING_OBSERVED} (a process the script started may have "
                    f"trained instead; it has its own report)."]
        over = (f"{_plural(self.optimizer_steps, 'optimizer step', 'optimizer steps')} "
                f"({_plural(self.executions, 'execution', 'executions')})" if self.optimizer_steps
                else _plural(self.executions, "execution", "executions"))
        head = (f"{who}: compile report: {self.graphs_compiled} graph(s) compiled in "
                f"{self.compile_seconds_total:.1f} s over {over}")
        cache = self.persistent_cache
        if cache.get("dir"):
            head += f", {cache.get('hits', 0)} loaded from the persistent cache"
        if not self.findings:
            return [head + "; no recompilation, CPU fallback or per-step host read: clean."]
        return [head + ":"] + [f"  - {f.problem} To fix: {f.fix}." for f in self.findings]


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _findings(timeline: CompileTimeline, fallbacks: dict[str, int], evaluations: int, syncs: int,
              steps: StepCounter | None, cache: dict) -> list[Finding]:
    found = []
    if timeline.keeps_recompiling:
        where = ", ".join(str(s) for s in timeline.steps_with_new_graphs[:8])
        found.append(Finding(
            f"{timeline.after_warmup} graph(s) were compiled after warm-up (step {timeline.warmup_steps}), "
            f"at {timeline.late_points} different steps ({where}, ...): input shapes are changing between "
            f"steps.", SHAPES_FIX))
    if steps is not None and steps.steps > 1:
        # Between optimizer steps: a read at every logging step is fine, one at (nearly) every step is not.
        measured = steps.steps - 1
        if steps.steps_with_host_reads >= max(2, EVALUATIONS_PER_STEP * measured):
            found.append(Finding(
                f"a tensor was read back to the host (explicit evaluation) in {steps.steps_with_host_reads} of "
                f"{measured} optimizer steps ({evaluations} in all).", EVALUATION_FIX))
    elif syncs and evaluations >= max(2, EVALUATIONS_PER_STEP * syncs):
        found.append(Finding(
            f"{evaluations} explicit evaluation(s) (a tensor read back to the host) in {syncs} sync(s).",
            EVALUATION_FIX))
    if fallbacks:
        ops = ", ".join(f"{op} x{count}" for op, count in sorted(fallbacks.items(), key=lambda kv: -kv[1]))
        found.append(Finding(f"CPU fallback ops: {ops}.", FALLBACK_FIX))
    if cache.get("load_failures"):
        found.append(Finding(
            f"{_plural(cache['load_failures'], 'persistent cache entry', 'persistent cache entries')} could not "
            f"be loaded (corrupt, or written by another torch-xla build); they were compiled again.",
            "nothing needed: the entries were rewritten; delete the cache folder if this repeats"))
    return found


def build_report(process: str, rank: int, world_size: int, device: str, exit_code: int | None,
                 timeline: CompileTimeline, cache: dict, steps: StepCounter | None = None) -> CompileReport:
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
    findings = _findings(timeline, aten, evaluations, syncs, steps, cache)
    if exit_code == exit_codes.COMPILATION_LIMIT and not timeline.keeps_recompiling:
        findings.insert(0, Finding(f"the compilation limit stopped this process after {timeline.compiles_seen} "
                                   f"graph(s), before the monitor could tell where they came from.", SHAPES_FIX))
    return CompileReport(
        process=process, rank=rank, world_size=world_size, device=device, exit_code=exit_code,
        optimizer_steps=steps.steps if steps else 0, syncs=syncs,
        steps_with_host_reads=steps.steps_with_host_reads if steps else 0,
        executions_per_step={str(k): v for k, v in sorted(steps.executions_per_step.items())} if steps else {},
        graphs_compiled=graphs_compiled(),
        compile_seconds_total=total, compile_seconds_per_graph=per_graph,
        graphs_after_warmup=timeline.after_warmup, steps_with_late_graphs=timeline.late_points,
        warmup_steps=timeline.warmup_steps,
        steps_with_new_graphs=timeline.steps_with_new_graphs,
        in_memory_cache_hits=_counter("CachedCompile"),
        executions=_counter("ExecuteComputation"),
        persistent_cache=cache,
        cpu_fallback_ops=aten,
        device_to_host_transfers=int(transfers[0]) if transfers else 0,
        explicit_evaluations=evaluations,
        findings=findings,
    )


def write_compile_report(report: CompileReport, folder: str) -> str | None:
    """Write compile-report-<process>.json into folder; a failure to write is logged, never raised."""
    if not folder:
        return None
    path = os.path.join(folder, f"compile-report-{report.process}.json")
    try:
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(report.to_json())
        os.replace(tmp, path)
        return path
    except OSError as e:
        log.warning("%s: could not write the compile report to %s: %s", report.process, path, e)
        return None


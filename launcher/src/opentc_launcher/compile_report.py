"""The compile report every compiled worker writes, whatever the backend: the same file, the same log line.

`compile-report-<process>.json` in the report folder (output/data/compiler/ under the toolkit) holds what
every backend counts (graphs compiled and when, compile seconds, the persistent cache, optimizer steps,
findings in Training Compiler's terms) and each backend's own counters beside them (`details`, flattened into
the JSON). The log gets one line: "clean", or one line per problem with its fix.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .files import strict_json, write_atomically
from .setting_names import MAX_COMPILATIONS, WARMUP_STEPS, setting

log = logging.getLogger("opentc_launcher")

# New graphs after warm-up are worth a warning when they keep appearing: seen at this many different
# steps. A burst at one step is legitimate (the first logging or evaluation step compiles its graphs).
RECOMPILATION_WARNING = 3

SHAPES_FIX = ("keep shapes static: pad every sequence to one fixed length (padding='max_length'), cut text "
              "into fixed-size blocks, and drop the last uneven batch (drop_last=True / dataloader_drop_last)")


@dataclass
class Finding:
    problem: str
    fix: str
    kind: str = ""   # what sort of problem (RECOMPILATION, ...): a job summary keeps one finding of each kind

    def text(self) -> str:
        return f"{self.problem} To fix: {self.fix}."


# Kinds of findings.
RECOMPILATION = "recompilation"
HOST_READS = "host_reads"
CPU_FALLBACK = "cpu_fallback"
GRAPH_BREAKS = "graph_breaks"
NOTHING_COMPILED = "nothing_compiled"
CACHE_LOAD_FAILURES = "cache_load_failures"
COMPILATION_LIMIT = "compilation_limit"
PER_LAYER_RECOMPILATION = "per_layer_recompilation"
LATE_COMPILATION = "late_compilation"
MAX_MOMENTS = 1000


# Every backend's words when a process compiled nothing: the same problem on each (its backend named), with the
# backend's own account of what the script did not do, and its own fix.
NOTHING_COMPILED_PROBLEM = ("nothing was compiled in this process: the compiler ({backend}) is on, but the script gave "
                            "it nothing to compile")


def nothing_compiled_finding(backend: str, because: str, fix: str) -> Finding:
    """The finding of a process that compiled nothing: `because` says what the script did not do, in the backend's
    terms."""
    return Finding(f"{NOTHING_COMPILED_PROBLEM.format(backend=backend)} ({because}), so it ran eagerly, uncompiled.",
                   fix, NOTHING_COMPILED)


OPTIMIZER_STEP = "optimizer step"


@dataclass
class CompileTimeline:
    """Compilations seen, relative to the training steps: optimizer steps (`unit`), or the backend's own unit where
    the script takes none (syncs on XLA), said in its findings and warnings."""

    warmup_steps: int
    unit: str = OPTIMIZER_STEP
    steps_seen: int = 0
    compiles_seen: int = 0
    after_warmup: int = 0
    late_points: int = 0                  # different steps at which graphs appeared after warm-up
    steps_with_new_graphs: list[int] = field(default_factory=list)
    # When new graphs were seen (time.monotonic(), right after they compiled): the step whose time holds one paid for
    # the compilation, and is left out of the step times (measurements.step_statistics).
    compiled_at: list[float] = field(default_factory=list)

    def observe(self, steps: int, compiles: int) -> None:
        new = compiles - self.compiles_seen
        if new > 0 and len(self.compiled_at) < MAX_MOMENTS:
            self.compiled_at.append(time.monotonic())
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

    def recompilation_finding(self) -> Finding | None:
        if not self.keeps_recompiling:
            return None
        where = ", ".join(str(s) for s in self.steps_with_new_graphs[:8])
        return Finding(f"{self.after_warmup} graph(s) were compiled after warm-up ({self.unit} {self.warmup_steps}"
                       f"{self.unit_note()}), at {self.late_points} different {self.unit}s ({where}, ...): input "
                       f"shapes are changing between steps.", SHAPES_FIX, RECOMPILATION)

    def unit_note(self) -> str:
        """Why the steps are counted in another unit than optimizer steps, where they are."""
        return "" if self.unit == OPTIMIZER_STEP else f": no optimizer step was taken, so {self.unit}s count"


def late_compilation_finding(stats: Mapping[str, Any]) -> Finding | None:
    """When steps after warm-up compiled new graphs and took more than twice the others' median: said, with what was
    done about it (they are left out of the step times). A step that compiled a small graph is left out silently."""
    left_out, slowest, median = stats.get("compiling_left_out"), stats.get("slowest_left_out"), stats.get("median")
    if not left_out or slowest is None or not median or slowest <= 2 * median:
        return None
    return Finding(f"{left_out} step(s) after warm-up (step {stats.get('warmup_steps')}) compiled new graphs, the "
                   f"slowest taking {slowest:.1f} s against a median of {median * 1000:.0f} ms for the others: "
                   f"they are left out of the job summary's step times, which would otherwise measure compilation.",
                   f"nothing, if they compile once, late (an evaluation, a last smaller batch: drop_last avoids "
                   f"it); give the warm-up more steps ({setting(WARMUP_STEPS)}) if they come early; if new shapes "
                   f"keep coming, {SHAPES_FIX}", LATE_COMPILATION)


def recompilation_warning(process: str, timeline: CompileTimeline, compiles: int) -> str:
    """The line logged while the job runs, when new graphs keep appearing after warm-up."""
    unit = timeline.unit
    return (f"{process}: new graphs keep being compiled after warm-up ({timeline.after_warmup} at "
            f"{timeline.late_points} different {unit}s, the last at {unit} {timeline.steps_seen}"
            f"{timeline.unit_note()}; {compiles} graphs in all): input shapes are probably changing between steps. "
            f"To fix: {SHAPES_FIX}.")


def limit_message(compiles: int, limit: int, what: str = "compiled") -> str:
    return (f"compilation limit reached: {compiles} graphs {what}, more than the {limit} allowed "
            f"({setting(MAX_COMPILATIONS)}). Shapes are "
            f"probably changing between steps; to fix: {SHAPES_FIX}.")


@dataclass
class CompileReport:
    process: str                    # rank<N>, or rank<N>-spawned<K> for a process the script started
    rank: int
    world_size: int
    backend: str
    device: str
    exit_code: int | None
    optimizer_steps: int
    graphs_compiled: int
    compile_seconds_total: float
    compile_seconds_per_graph: list[float]
    graphs_after_warmup: int
    steps_with_late_graphs: int
    warmup_steps: int
    steps_with_new_graphs: list[int]
    persistent_cache: dict
    findings: list[Finding]
    details: dict[str, Any] = field(default_factory=dict)   # the backend's own counters, flattened in the JSON
    step_unit: str = OPTIMIZER_STEP  # what warmup_steps and steps_with_new_graphs count (CompileTimeline.unit)
    activity: str = ""              # what ran, in the backend's words ("31 executions"), for the summary line
    clean_means: str = "clean"      # what "clean" checked, in the backend's words
    nothing_observed: str = ""      # when set: the process ran nothing on the compiler (said instead of clean)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        details = data.pop("details")
        for key in ("activity", "clean_means", "nothing_observed"):
            data.pop(key)
        return {**data, **details}

    def to_json(self) -> str:
        return strict_json(self.to_dict(), indent=2)

    def summary_lines(self) -> list[str]:
        who = self.process
        if self.nothing_observed and not self.findings:
            return [f"{who}: compile report: {self.nothing_observed}"]
        steps = _plural(self.optimizer_steps, "optimizer step", "optimizer steps")
        if self.optimizer_steps and self.activity:
            over = f"{steps} ({self.activity})"
        else:
            over = steps if self.optimizer_steps or not self.activity else self.activity
        head = (f"{who}: compile report: {self.graphs_compiled} graph(s) compiled in "
                f"{self.compile_seconds_total:.1f} s over {over}")
        cache = self.persistent_cache
        if cache.get("dir"):
            head += f", {cache.get('hits', 0)} loaded from the persistent cache"
        if not self.findings:
            return [f"{head}; {self.clean_means}: clean."]
        return [head + ":"] + [f"  - {f.text()}" for f in self.findings]


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def write_compile_report(report: CompileReport, folder: str) -> str | None:
    """Write compile-report-<process>.json into folder; a failure to write is logged, never raised."""
    if not folder:
        return None
    path = os.path.join(folder, f"compile-report-{report.process}.json")
    try:
        write_atomically(path, report.to_json())
        return path
    except OSError as e:
        log.warning("%s: could not write the compile report to %s: %s", report.process, path, e)
        return None


def log_report(report: CompileReport, path: str | None) -> None:
    for line in report.summary_lines():
        (log.warning if report.findings else log.info)("%s", line)
    if path:
        log.info("%s: compile report written to %s", report.process, path)

"""Everything a worker does for torch.compile (TorchInductor) before and after the user's script.

Before the script: the process's own environment (the persistent caches in the job's cache folder, Inductor's
compile threads shared among the host's workers, a linkable libcuda for Triton); nothing of torch is imported,
so a script that sets variables before `import torch` still gets its way. When the script first uses Dynamo
(torch.compile), the session hooks Dynamo's compile callbacks (each compilation timed, put at its optimizer step,
counted against the compilation limit) and its graph-break log (each break with its reason and the user's source
line). After the script: the compile report, from Dynamo's and Inductor's counters.

torch._dynamo.utils.counters and get_compilation_metrics are private: every read of them is guarded, and a
newer torch that lacks one gives "unknown" figures, never a failed job.
"""

from __future__ import annotations

import importlib.metadata as metadata
import logging
import os
import re
import sys
import time
import types
from collections.abc import MutableMapping
from types import ModuleType
from typing import Any

from .. import exit_codes
from ..after_import import when_imported
from ..cache_folders import cache_folder
from ..compile_progress import DEFAULT_NAME as PROGRESS
from ..compile_progress import CompileProgress, every
from ..compile_report import (
    GRAPH_BREAKS,
    RECOMPILATION,
    RECOMPILATION_WARNING,
    CompileReport,
    CompileTimeline,
    Finding,
    limit_message,
    nothing_compiled_finding,
    recompilation_warning,
)
from ..env_values import keep_theirs
from ..files import unwritable
from ..identity import WorkerIdentity, per_rank_files
from ..options import WorkerOptions
from ..script import Program
from ..setting_names import setting
from ..worker_session import WorkerSession
from .compile_time import CompileTimeDefaults
from .libcuda import driver_folders, linkable_libcuda
from .named_settings import DEBUG_LOG
from .per_layer import per_layer_finding
from .regional import BOUNDARY_NAME
from .trace_report import debug_environment

log = logging.getLogger("opentc_launcher")

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"   # where torch keeps Inductor's cache


def cache_folder_for(root: str, device: str) -> str:
    """This torch's Inductor cache folder under a cache root (cache_folders' policy): the session's and the backend's
    working copy's (inductor/__init__)."""
    return cache_folder(root, "inductor-torch", metadata.version("torch"), device)

# Variables the session sets per process, kept when the user set them; those made per-rank are always adjusted.
PER_RANK_FILE_VARIABLES = ("TORCH_LOGS_OUT",)
GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
MAX_LISTED = 20

NOTHING_COMPILED_FINDING = nothing_compiled_finding(
    "inductor",
    "Dynamo captured no graph: the script never called torch.compile, no Trainer or Accelerator compiled the model "
    "for it, or what it compiled broke before its first operation",
    "compile the model once it is on its device: model = torch.compile(model) (Trainer and Accelerate scripts "
    "compile by themselves, through ACCELERATE_DYNAMO_BACKEND=inductor)")
DDP_WRAPPER_FIX = ("compile the model before wrapping it: model = DistributedDataParallel(torch.compile(model)); "
                   "torch.compile(DistributedDataParallel(model)) breaks inside DDP's forward on this torch")
GRAPH_BREAK_FIX = ("each graph break ends a compiled graph and runs the Python in between eagerly: move or rewrite "
                   "the line named (printing, .item(), a data-dependent `if`, a call Dynamo cannot trace) outside "
                   f"the compiled code; {setting(DEBUG_LOG)} logs every break")
_PACKAGE_FOLDERS = ("site-packages", "dist-packages")


def library_of(where: str) -> str | None:
    """The installed package a graph break's file belongs to (transformers, huggingface_hub, torch), or None for the
    script's own code."""
    parts = where.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part in _PACKAGE_FOLDERS:
            return parts[i + 1].split(":")[0].removesuffix(".py")
    return None


def library_break_fix(libraries: list[str]) -> str:
    """What a user can do about breaks in code that is not theirs."""
    owner = f"{libraries[0]}'s code" if len(libraries) == 1 else f"the code of {', '.join(libraries)}"
    newer = f"a newer {libraries[0]}" if len(libraries) == 1 else "newer versions of them"
    return (f"the break is in {owner}, not the script's, so no line of the script moves it: try {newer} (in "
            f"requirements.txt) or report the reason to its maintainers; meanwhile keep the compiled part to what "
            f"repeats (Trainer and Accelerate jobs compile each repeated block by default), so that the break falls "
            f"between compiled graphs rather than inside one")


def break_fix(listed: list[dict[str, Any]]) -> str:
    """The fix for the breaks listed: the script's own lines, the libraries' (library_break_fix), or both."""
    libraries = sorted({lib for b in listed if (lib := library_of(b["where"]))})
    if not libraries:
        return GRAPH_BREAK_FIX
    if all(library_of(b["where"]) for b in listed):
        return library_break_fix(libraries)
    return f"{GRAPH_BREAK_FIX}; for those in {', '.join(libraries)}: {library_break_fix(libraries)}"


class GraphBreaks(logging.Handler):
    """Dynamo's graph-break log ("Graph break in user code at FILE:LINE ... Reason: ..."), counted by place and
    reason. Captured without printing it, unless the user asked for it (TORCH_LOGS=graph_breaks)."""

    _WHERE = re.compile(r"in user code at (?P<where>\S+:\d+)")
    _REASON = re.compile(r"Reason: (?P<reason>[^\n]+)")
    _EXPLANATION = re.compile(r"Explanation: (?P<explanation>[^\n]+)")   # torch >= 2.7: what was not traceable

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: dict[tuple[str, str], int] = {}

    def attach(self) -> None:
        logger = logging.getLogger(GRAPH_BREAK_LOGGER)
        if not logger.isEnabledFor(logging.DEBUG):   # not asked for: captured here, not printed
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
        logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001  (a log record is never a reason to fail)
            return
        if BOUNDARY_NAME in text:   # regional compilation's own break, around the part that holds the blocks
            return
        where = self._WHERE.search(text)
        reason = self._REASON.search(text)
        explanation = self._EXPLANATION.search(text)
        said = (reason["reason"] if reason else text.split("\n")[0]).strip()
        if explanation:
            said += f" ({explanation['explanation'].strip()})"
        key = (where["where"] if where else "unknown", said)
        if key in self.seen or len(self.seen) < MAX_LISTED:
            self.seen[key] = self.seen.get(key, 0) + 1

    def listed(self) -> list[dict[str, Any]]:
        return [{"where": where, "reason": reason, "count": count}
                for (where, reason), count in sorted(self.seen.items(), key=lambda kv: -kv[1])]


def _counters() -> dict[str, dict[str, int]] | None:
    """Dynamo's and Inductor's counters (private); None when this torch has none that can be read."""
    try:
        from torch._dynamo.utils import counters

        return {group: {k: int(v) for k, v in values.items()} for group, values in counters.items()
                if group in ("stats", "inductor", "aot_autograd", "graph_break", "frames")}
    except Exception:  # noqa: BLE001  (private API: unknown rather than a failed job)
        return None


def what_dynamo_compiles() -> str:
    """The function Dynamo is compiling, from its compile callback (private: its frames' `code`), in words:
    `GPT2Block.forward (transformers/models/gpt2/modeling_gpt2.py:262)`; "a function" when it cannot be read."""
    try:
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None:
            code = frame.f_locals.get("code") if frame.f_code.co_name in ("compile_inner", "_compile") else None
            if isinstance(code, types.CodeType):
                path = code.co_filename.replace("\\", "/")
                for marker in _PACKAGE_FOLDERS:
                    path = path.split(f"/{marker}/", 1)[-1]
                return f"{getattr(code, 'co_qualname', code.co_name)} ({path}:{code.co_firstlineno})"
            frame = frame.f_back
    except Exception:  # noqa: BLE001  (private frames: the words are only less precise)
        pass
    return "a function"


# Where a compilation's time goes, as torch times it (torch._dynamo.utils.compilation_time_metrics, private: each
# phase's seconds, nested): Dynamo's whole compile, the backend's share of it, AOTAutograd, Inductor's lowering and
# code generation, and the C++/Triton compilers it waits for.
PHASES = {"_compile.compile_inner": "all", "OutputGraph.call_user_compiler": "the backend (AOTAutograd and Inductor)",
          "create_aot_dispatcher_function": "AOTAutograd", "compile_fx_inner": "Inductor",
          "GraphLowering.codegen": "Inductor's code generation",
          "async_compile.wait": "waiting for the kernels' compilers", "compile_file": "the C++ compiler"}


def compile_phases() -> dict[str, float]:
    """Seconds per phase of this process's compilations (PHASES' words), and Dynamo's own tracing (all but the
    backend's); {} when this torch keeps no such figures."""
    try:
        from torch._dynamo.utils import compilation_time_metrics

        totals = {name: sum(compilation_time_metrics.get(name, ())) for name in PHASES}
    except Exception:  # noqa: BLE001  (private API: no timeline rather than a failed report)
        return {}
    phases = {words: round(totals[name], 3) for name, words in PHASES.items() if totals[name]}
    if totals["_compile.compile_inner"]:
        phases["Dynamo's tracing"] = round(totals["_compile.compile_inner"] -
                                           totals["OutputGraph.call_user_compiler"], 3)
    return phases


def _recompilations() -> list[dict[str, Any]]:
    """Recompiled functions with Dynamo's reason (the last 64 compilations torch keeps)."""
    try:
        from torch._dynamo.utils import get_compilation_metrics

        metrics = list(get_compilation_metrics())
    except Exception:  # noqa: BLE001  (private API)
        return []
    found = []
    for m in metrics:
        reason = getattr(m, "recompile_reason", None)
        if reason:
            found.append({"function": getattr(m, "co_name", "?"),
                          "where": f"{getattr(m, 'co_filename', '?')}:{getattr(m, 'co_firstlineno', '?')}",
                          "reason": str(reason)})
    return found[-MAX_LISTED:]


class InductorSession(WorkerSession):
    """torch.compile in one worker: configured before the script, observed while it runs, reported after."""

    compiles = True

    def __init__(self, options: WorkerOptions, identity: WorkerIdentity, process: str):
        super().__init__(options, identity, process)
        self.defaults = CompileTimeDefaults(options, process)
        self.timeline = CompileTimeline(options.warmup_steps)
        self.compile_seconds: list[float] = []
        self.cache: dict = {"dir": "", "mode": "torch's default (/tmp, gone with the container)"}
        self.graph_breaks = GraphBreaks()
        self.progress = CompileProgress(self.process, every(options.compile_progress_seconds, options.is_off(PROGRESS)))
        self._compiling_since: float | None = None
        self._next_warning = RECOMPILATION_WARNING

    @classmethod
    def prepare(cls, options: WorkerOptions, identity: WorkerIdentity, environ: MutableMapping[str, str],
                program: Program) -> InductorSession:
        session = cls(options, identity, f"rank{identity.rank}")
        session._configure(environ)
        session.defaults.configure(environ, identity, program, environ.get(CACHE_VARIABLE, ""))
        session.defaults.begin(environ)
        session.start()
        log.info("rank %d/%d: torch.compile (TorchInductor) ready on %s; Inductor cache %s (%s)", identity.rank,
                 identity.world_size, options.device, session.cache.get("working_dir") or session.cache["dir"] or "-",
                 session.cache["mode"])
        log.info("rank %d: compile-time defaults: %s", identity.rank, session.defaults.log_line())
        return session

    def _configure(self, environ: MutableMapping[str, str]) -> None:
        """This process's environment: what Inductor and Triton read when they first compile."""
        options, identity = self.options, self.identity
        wanted: dict[str, str] = {}
        if options.compile_cache_dir:
            published = cache_folder_for(options.compile_cache_dir, options.device)
            if options.compile_cache_work_dir:   # the launcher's working copy, published after a success
                folder = cache_folder_for(options.compile_cache_work_dir, options.device)
                mode = f"a working copy of {published}, published there after a successful job"
            else:
                folder, mode = published, "read-write, shared by the job's processes"
            problem = unwritable(folder)
            if problem:
                log.warning("%s: persistent compilation cache off: %s is not usable (%s)", self.process, folder,
                            problem)
            else:
                # One folder for every process of the job: Inductor writes its entries atomically.
                wanted[CACHE_VARIABLE] = folder
                wanted["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
                self.cache = {"dir": published, "working_dir": folder, "mode": mode}
        if options.debug_mode:   # before torch is imported: it reads TORCH_LOGS and TORCH_TRACE then
            wanted.update(debug_environment(options.debug_folder()))
        # Each worker would otherwise start min(32, CPUs) compile processes of its own.
        wanted["TORCHINDUCTOR_COMPILE_THREADS"] = str(max(1, (os.cpu_count() or 1) // identity.local_world_size))
        if options.device == "cuda":
            wanted.update(linkable_libcuda(environ, driver_folders()))
        to_set, kept = keep_theirs(wanted, environ)
        for line in kept:
            log.info("%s: found pre-existing configuration %s", self.process, line)
        ours = wanted.get(CACHE_VARIABLE)
        if ours is not None and environ.get(CACHE_VARIABLE, ours) != ours:
            self.cache = {"dir": environ[CACHE_VARIABLE], "mode": f"the user's {CACHE_VARIABLE}"}
        environ.update(to_set)
        environ.update(per_rank_files(PER_RANK_FILE_VARIABLES, identity, environ))

    def start(self) -> None:
        super().start()
        when_imported("torch._dynamo", self._hook_dynamo)

    def _hook_dynamo(self, _dynamo: ModuleType) -> None:
        from torch._dynamo import callback

        callback.on_compile_start(self._compile_started)
        callback.on_compile_end(self._compile_ended)
        self.graph_breaks.attach()
        self.defaults.dynamo_imported()

    # -- while the script runs --------------------------------------------------------------------------------
    def _compile_started(self, *_args: Any) -> None:
        self._compiling_since = time.monotonic()
        self.progress.started(what_dynamo_compiles())
        self.defaults.at_first_compile()

    def _compile_ended(self, *_args: Any) -> None:
        self.progress.ended()
        if not self.compile_seconds:
            self.defaults.after_first_compile()
        if self._compiling_since is not None:
            self.compile_seconds.append(round(time.monotonic() - self._compiling_since, 3))
            self._compiling_since = None
        captured = self._graphs_captured()
        self.timeline.observe(self.steps.steps, captured)
        if self.timeline.late_points >= self._next_warning:
            log.warning("%s", recompilation_warning(self.process, self.timeline, captured))
            self._next_warning *= 2
        if self.options.max_compilations and captured > self.options.max_compilations:
            self._compilation_limit_reached(captured)

    def finish(self, exit_code: int) -> None:
        self.defaults.close()
        super().finish(exit_code)

    def _graphs_captured(self) -> int:
        """Graphs Dynamo captured (each new input shape, graph break or function adds one), cached or not."""
        counts = _counters()
        if counts is None:
            return len(self.compile_seconds)
        return counts.get("stats", {}).get("unique_graphs", 0)

    def _compilation_limit_reached(self, captured: int) -> None:
        """Inside the compilation that passed the limit."""
        message = limit_message(captured, self.options.max_compilations, "captured by torch.compile (Dynamo)")
        self.stop_at_compilation_limit(message, self._build_report)

    # -- after it ---------------------------------------------------------------------------------------------
    def compiled_at(self) -> list[float]:
        return self.timeline.compiled_at

    def compile_report(self, exit_code: int) -> CompileReport | None:
        if not self.options.compile_report_dir:
            return None
        return self._build_report(exit_code)

    def _build_report(self, exit_code: int) -> CompileReport:
        readable = _counters()
        counts = readable or {}
        inductor, aot = counts.get("inductor", {}), counts.get("aot_autograd", {})
        breaks_total = sum(n for reason, n in counts.get("graph_break", {}).items() if BOUNDARY_NAME not in reason)
        recompilations = _recompilations()
        captured = counts.get("stats", {}).get("unique_graphs", 0)
        compiled = inductor.get("fxgraph_cache_miss", 0) + inductor.get("fxgraph_cache_bypass", 0)
        findings = []
        nothing = (captured == 0) if readable is not None else not self.compile_seconds
        if nothing and exit_code != exit_codes.COMPILATION_LIMIT:
            findings.append(NOTHING_COMPILED_FINDING)
        if breaks_total:
            listed = self.graph_breaks.listed()
            places = "; ".join(f"{b['reason']} at {b['where']} (x{b['count']})" for b in listed[:5])
            in_ddp = any("nn/parallel/distributed.py" in b["where"] or "_inside_ddp_forward" in b["reason"]
                         for b in listed)
            findings.append(Finding(f"{breaks_total} graph break(s){': ' + places if places else ''}.",
                                    DDP_WRAPPER_FIX if in_ddp else break_fix(listed), GRAPH_BREAKS))
        recompiling = self.timeline.recompilation_finding()
        if recompiling:
            reasons = "; ".join(f"{r['function']} ({r['reason']})" for r in recompilations[-3:])
            findings.append(Finding(recompiling.problem + (f" Dynamo's reasons: {reasons}." if reasons else ""),
                                    recompiling.fix, RECOMPILATION))
        per_layer = per_layer_finding(recompilations, self.defaults.whole_model_words())
        if per_layer:
            findings.append(per_layer)
        return CompileReport(
            process=self.process, rank=self.identity.rank, world_size=self.identity.world_size, backend="inductor",
            device=self.options.device, exit_code=exit_code, optimizer_steps=self.steps.steps,
            graphs_compiled=compiled, compile_seconds_total=round(sum(self.compile_seconds), 3),
            compile_seconds_per_graph=self.compile_seconds,
            graphs_after_warmup=self.timeline.after_warmup, steps_with_late_graphs=self.timeline.late_points,
            warmup_steps=self.timeline.warmup_steps, steps_with_new_graphs=self.timeline.steps_with_new_graphs,
            persistent_cache={**self.cache, "hits": inductor.get("fxgraph_cache_hit", 0),
                              "misses": inductor.get("fxgraph_cache_miss", 0),
                              "bypassed": inductor.get("fxgraph_cache_bypass", 0),
                              "aot_autograd_hits": aot.get("autograd_cache_hit", 0),
                              "aot_autograd_misses": aot.get("autograd_cache_miss", 0)},
            findings=findings,
            details={
                "graphs_captured": captured,
                "compilations": len(self.compile_seconds),
                "graph_breaks_total": breaks_total,
                "graph_breaks": self.graph_breaks.listed(),
                "recompilations": recompilations,
                "counters_available": readable is not None,
                "compile_time_defaults": dict(self.defaults.state),
                "compile_timeline": list(self.progress.timeline),
                "compile_phases": compile_phases(),
            },
            activity=f"{captured} graph{'' if captured == 1 else 's'} captured",
            clean_means="no graph break or recompilation after warm-up",
        )

"""The session a worker runs around the user's script, whatever the backend: the step counter, the script-wide
checks (an optimizer that trains nothing, shards that do not split evenly, fp16 that torch ignores) and the
measurements for the job summary. A backend's own session (xla/session.py, inductor/session.py) extends it with what
its compiler observes and reports."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from . import exit_codes
from .compile_report import (
    HOST_READS,
    CompileReport,
    Finding,
    late_compilation_finding,
    log_report,
    write_compile_report,
)
from .era_patches import install as install_era_patches
from .failure_records import record_error
from .host_reads import HOST_READS_FIX, HostReadFigures, HostReads, per_step_finding
from .identity import WorkerIdentity
from .idle_optimizer import IdleOptimizerCheck
from .ignored_fp16 import IgnoredFp16Check
from .measurements import (
    BatchWatch,
    children_usage,
    cuda_device_memory_mb,
    cuda_peak_memory_mb,
    headroom_finding,
    host_peak_memory_mb,
    own_cpu_seconds,
    step_statistics,
)
from .model_watch import ModelWatch
from .options import WorkerOptions
from .patching import refused
from .process_group import ProcessGroupWatch
from .script_findings import ScriptFindings
from .steps import StepCounter
from .sync_free_step import install as install_sync_free_step
from .uneven_shards import UnevenShardsCheck
from .worker_record import CompiledFigures, CompileFinding, StepTimes, WorkerRecord, write_record

log = logging.getLogger("opentc_launcher")


class WorkerSession:
    """One worker process's compiler, around the user's script: `start` before it, `after_step` after each
    optimizer step, `finish` after it, however it ended (the compile report, where the backend has one, and the
    measurements for the job summary, for every backend)."""

    compiles = False   # whether the backend compiles the script (a compiled job's memory headroom is a finding)

    def __init__(self, options: WorkerOptions, identity: WorkerIdentity, process: str):
        self.options = options
        self.identity = identity
        self.process = process   # rank<N> (or rank<N>-spawned<K>): names its report and its cache folder
        self.steps = StepCounter(self._stepped)
        self.batches = BatchWatch()
        self.model = ModelWatch()
        self.process_group = ProcessGroupWatch()
        self.findings = ScriptFindings(identity.rank)
        self.idle_optimizers = IdleOptimizerCheck(self.findings)
        self.uneven_shards = UnevenShardsCheck(self.findings)
        self.ignored_fp16 = IgnoredFp16Check(self.findings)
        self.host_reads = HostReads(self.device_type)
        self._watching_reads = False
        self._stopping = threading.Lock()

    @property
    def device_type(self) -> str:
        """What a device tensor is in this worker (torch's device type): cuda, or cpu on a CPU job."""
        return "cpu" if self.options.device == "cpu" else "cuda"

    def start(self) -> None:
        self.steps.install()
        self.idle_optimizers.install()
        self.uneven_shards.install()
        self.ignored_fp16.install()
        if self.options.library_patches:
            install_era_patches()
            install_sync_free_step()
        if self.options.summary_dir:
            self.batches.install()
            self.model.install()
        if self.options.summary_dir or self.options.compile_report_dir:
            self.host_reads.install()
            self._watching_reads = True

    def _stepped(self, step: int) -> None:
        self.host_reads.step_ended()
        if step == 1 and self.options.summary_dir:
            self.model.describe()   # the model being trained, while it is alive: a script may drop it at the end
            self.process_group.look()   # formed before training; a script may destroy it before it ends
        self.after_step(step)

    def after_step(self, step: int) -> None:
        """After optimizer step `step` (1, 2, ...); the backend's per-step observations."""

    def compile_report(self, exit_code: int) -> CompileReport | None:
        """The backend's report of what it compiled; None for a backend that compiles nothing."""
        return None

    def compiled_at(self) -> list[float]:
        """When the backend saw new graphs (time.monotonic()): the steps that compiled, left out of the step times."""
        return []

    def peak_memory(self) -> tuple[float, str]:
        """(MB, what it measured): CUDA's allocator peak when the script used CUDA, else the process's peak."""
        cuda = cuda_peak_memory_mb()
        if cuda is not None:
            return cuda, "CUDA allocator's peak"
        return host_peak_memory_mb(), "peak resident memory of the process"

    def device_memory(self) -> float | None:
        """The memory of the device the script used (MB), on a GPU; None on a CPU."""
        return cuda_device_memory_mb()

    def finish(self, exit_code: int) -> None:
        self.write_results(exit_code, self.compile_report(exit_code))

    def write_results(self, exit_code: int, report: CompileReport | None) -> None:
        """The compile report (file and log line) and the measurements, at the end or when a limit stops the
        process."""
        self.idle_optimizers.conclude()   # a verdict on the whole job, before the record that carries it
        for refusal in refused():   # each logged when it happened: a finding too, so that the job summary has it
            if refusal.finding() not in self.findings.found:
                self.findings.found.append(refusal.finding())
        stats = step_statistics(self.steps, self.options.warmup_steps, self.compiled_at())
        reads = self.host_reads.figures() if self._watching_reads else None
        if reads is not None:
            self._report_host_reads(reads, report)
        if report is not None:
            late = late_compilation_finding(stats)
            if late is not None:
                report.findings.append(late)
            log_report(report, write_compile_report(report, self.options.compile_report_dir))
        if self.options.summary_dir:
            write_record(self.options.summary_dir, self.measurements(exit_code, report, stats))

    def _report_host_reads(self, reads: HostReadFigures, report: CompileReport | None) -> None:
        """The host reads in the compile report (its details, and a finding where a place reads every step) or, for
        a backend without one, among the script's findings. A backend that found per-step reads its own way (XLA's
        counters) keeps its finding, told where they are."""
        problem = per_step_finding(reads)
        if report is None:
            if problem:
                self.findings.add(Finding(problem, HOST_READS_FIX, HOST_READS).text())
            return
        report.details["host_reads"] = reads
        own = next((f for f in report.findings if f.kind == HOST_READS), None)
        if own is not None and reads["per_step_sites"]:
            own.problem += " Where: " + "; ".join(s["where"] for s in reads["per_step_sites"][:5]) + "."
        elif own is None and problem:
            report.findings.append(Finding(problem, HOST_READS_FIX, HOST_READS))

    def stop_at_compilation_limit(self, message: str, build_report: Callable[[int], CompileReport]) -> NoReturn:
        """Stop this worker now, with the compile report and the reason, from whichever thread saw the limit
        passed first (a compile monitor's, or the one compiling)."""
        if not self._stopping.acquire(blocking=False):
            threading.Event().wait()   # the other thread is writing the report and ends the process
        log.error("%s: %s", self.process, message)
        self.write_results(exit_codes.COMPILATION_LIMIT, build_report(exit_codes.COMPILATION_LIMIT))
        record_error(message, "", exit_codes.COMPILATION_LIMIT)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_codes.COMPILATION_LIMIT)   # the main thread may be inside a compilation: do not wait

    def measurements(self, exit_code: int, report: CompileReport | None, stats: StepTimes) -> WorkerRecord:
        steps = self.steps
        ends = steps.step_ends
        throughput = None
        if len(ends) >= 2:
            start = ends[stats["warmup_steps"] - 1] if stats["warmup_steps"] else ends[0]
            throughput = self.batches.rates(start, ends[-1])
        memory, kind = self.peak_memory()
        device_memory = self.device_memory()
        if self.compiles and exit_code == 0:
            headroom = headroom_finding(memory, device_memory)
            if headroom:
                self.findings.add(headroom)
        children_cpu, children_memory = children_usage()
        self.process_group.look()
        return WorkerRecord(
            process=self.process, rank=self.identity.rank, world_size=self.identity.world_size,
            backend=self.options.backend, device=self.options.device, exit_code=exit_code,
            optimizer_steps=steps.steps,
            first_step_at=steps.wall_clock(ends[0]) if len(ends) else None,
            step_seconds=stats, throughput=throughput,
            peak_memory_mb=round(memory, 1), peak_memory_kind=kind,
            device_memory_mb=None if device_memory is None else round(device_memory, 1),
            compile=None if report is None else CompiledFigures(
                seconds=report.compile_seconds_total, graphs_compiled=report.graphs_compiled,
                cache_hits=report.persistent_cache.get("hits", 0)),
            findings=list(self.findings.found),
            # the compile report's findings, each with its kind: the job summary keeps one of each kind
            compile_findings=[CompileFinding(kind=f.kind, text=f.text()) for f in report.findings] if report else [],
            model=self.model.figures,
            host_reads=self.host_reads.figures() if self._watching_reads else None,
            children_cpu_seconds=round(children_cpu, 2), children_peak_memory_mb=round(children_memory, 1),
            process_group=self.process_group.seen,
            cpu_seconds=round(own_cpu_seconds(), 2), last_step_at=steps.wall_clock(ends[-1]) if len(ends) else None,
        )

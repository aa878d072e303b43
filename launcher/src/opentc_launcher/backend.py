"""The one interface every compiler backend sits behind, and the session a worker runs around the script.

A backend answers, for the outermost launcher (pure, no torch imported): which device a launch uses, whether
several workers may run on it, and what the workers' environment needs. In each worker it starts a session:
prepared before the script, told after each optimizer step (the shared StepCounter), finished after the script
with the backend's compile report. Generic modules (decision, worker, run, the toolkit's plan) know backends only
through this interface; each backend's own names live in its own module (eager, xla/, inductor/).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, NoReturn

from . import exit_codes
from .compile_report import CompileReport, log_report, write_compile_report
from .cuda_driver import driver_problem
from .failure_records import record_error
from .identity import WorkerIdentity
from .idle_optimizer import IdleOptimizerCheck
from .ignored_fp16 import IgnoredFp16Check
from .measurements import BatchWatch, cuda_peak_memory_mb, host_peak_memory_mb, step_statistics, write_record
from .options import WorkerOptions
from .published_cache import WorkingCopy
from .script import Program
from .script_findings import ScriptFindings
from .steps import StepCounter
from .uneven_shards import UnevenShardsCheck

log = logging.getLogger("opentc_launcher")


class LaunchRefused(Exception):
    """The launch cannot go ahead as configured; the message says why and what is accepted."""


def cuda_or_cpu(requested: str, gpu_count: int, who: str, env: Mapping[str, str]) -> str:
    """The device for backends that run on torch's own devices: cuda with a GPU visible, else cpu. On cuda, the
    host's driver must support the CUDA torch was built for (cuda_driver)."""
    if requested == "auto":
        requested = "cuda" if gpu_count > 0 else "cpu"
    if requested not in ("cuda", "cpu"):
        raise LaunchRefused(f"device {requested!r} is not accepted for {who}: use cuda or cpu, or auto (cuda when "
                            f"a GPU is visible, else cpu).")
    if requested == "cuda" and gpu_count == 0:
        raise LaunchRefused(no_gpu_message("device cuda", f"{who} on a GPU"))
    problem = driver_problem(env) if requested == "cuda" else None
    if problem:
        raise LaunchRefused(problem)
    return requested


def no_gpu_message(asked: str, what: str) -> str:
    return (f"no GPU visible: {asked} asks for {what}, but this machine (or container) shows no GPU (nvidia-smi "
            f"and NVML find none). Run on a GPU instance type, or locally with `docker run --gpus all` and the "
            f"NVIDIA container toolkit; or let the device be chosen (auto) to train on the CPU.")


@dataclass(frozen=True)
class FollowUp:
    """A command to run after the workers ended (a report rendered from their files): what it makes, and where."""

    argv: tuple[str, ...]
    what: str          # for the log: "tlparse's report of rank0's torch.compile trace"
    product: str       # the file it writes when it succeeds

    def outcome(self, exit_code: int, stderr: str) -> str | None:
        """None when it made its product, else what went wrong, in words."""
        if exit_code == 0 and os.path.isfile(self.product):
            return None
        said = stderr.strip()[-500:]
        return f"exit code {exit_code}{': ' + said if said else ''}"


class WorkerSession:
    """One worker process's compiler, around the user's script: `start` before it, `after_step` after each
    optimizer step, `finish` after it, however it ended (the compile report, where the backend has one, and the
    measurements for the job summary, for every backend)."""

    def __init__(self, options: WorkerOptions, identity: WorkerIdentity, process: str):
        self.options = options
        self.identity = identity
        self.process = process   # rank<N> (or rank<N>-spawned<K>): names its report and its cache folder
        self.steps = StepCounter(self.after_step)
        self.batches = BatchWatch()
        self.findings = ScriptFindings(identity.rank)
        self.idle_optimizers = IdleOptimizerCheck(self.findings)
        self.uneven_shards = UnevenShardsCheck(self.findings)
        self.ignored_fp16 = IgnoredFp16Check(self.findings)
        self._stopping = threading.Lock()

    def start(self) -> None:
        self.steps.install()
        self.idle_optimizers.install()
        self.uneven_shards.install()
        self.ignored_fp16.install()
        if self.options.summary_dir:
            self.batches.install()

    def after_step(self, step: int) -> None:
        """After optimizer step `step` (1, 2, ...); the backend's per-step observations."""

    def compile_report(self, exit_code: int) -> CompileReport | None:
        """The backend's report of what it compiled; None for a backend that compiles nothing."""
        return None

    def peak_memory(self) -> tuple[float, str]:
        """(MB, what it measured): CUDA's allocator peak when the script used CUDA, else the process's peak."""
        cuda = cuda_peak_memory_mb()
        if cuda is not None:
            return cuda, "CUDA allocator's peak"
        return host_peak_memory_mb(), "peak resident memory of the process"

    def finish(self, exit_code: int) -> None:
        self.write_results(exit_code, self.compile_report(exit_code))

    def write_results(self, exit_code: int, report: CompileReport | None) -> None:
        """The compile report (file and log line) and the measurements, at the end or when a limit stops the
        process."""
        self.idle_optimizers.conclude()   # a verdict on the whole job, before the record that carries it
        if report is not None:
            log_report(report, write_compile_report(report, self.options.compile_report_dir))
        if self.options.summary_dir:
            write_record(self.options.summary_dir, self.process, self.measurements(exit_code, report))

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

    def measurements(self, exit_code: int, report: CompileReport | None) -> dict:
        steps = self.steps
        stats = step_statistics(steps, self.options.warmup_steps)
        ends = steps.step_ends
        throughput = None
        if len(ends) >= 2:
            start = ends[stats["warmup_steps"] - 1] if stats["warmup_steps"] else ends[0]
            throughput = self.batches.rates(start, ends[-1])
        memory, kind = self.peak_memory()
        return {
            "process": self.process, "rank": self.identity.rank, "world_size": self.identity.world_size,
            "backend": self.options.backend, "device": self.options.device, "exit_code": exit_code,
            "optimizer_steps": steps.steps,
            "first_step_at": steps.wall_clock(ends[0]) if len(ends) else None,
            "step_seconds": stats, "throughput": throughput,
            "peak_memory_mb": round(memory, 1), "peak_memory_kind": kind,
            "compile": None if report is None else {
                "seconds": report.compile_seconds_total, "graphs_compiled": report.graphs_compiled,
                "cache_hits": report.persistent_cache.get("hits", 0)},
            "findings": list(self.findings.found),
            # the compile report's findings, each with its kind: the job summary keeps one of each kind
            "compile_findings": [{"kind": f.kind, "text": f.text()} for f in report.findings] if report else [],
        }


class CompilerBackend(ABC):
    """What a launch needs to know of one compiler (see the module's docstring)."""

    name: ClassVar[str]
    title: ClassVar[str]          # how the log calls it: "PyTorch/XLA", "torch.compile (TorchInductor)"
    compiles: ClassVar[bool] = True   # False for plain PyTorch (eager): not a compiler a job can choose
    # What this backend turns on by default to cut compile time, by name, each with what it does in a few words; a
    # launch leaves any of them off by name (WorkerOptions.defaults_off).
    optional_defaults: ClassVar[Mapping[str, str]] = MappingProxyType({})

    def missing(self) -> str | None:
        """What this backend needs that is not installed here, in words (the xla backend in the inductor image), or
        None when it can run."""
        return None

    @abstractmethod
    def decide_device(self, requested: str, env: Mapping[str, str], gpu_count: int) -> str:
        """The device every worker uses (`requested` is an option's value, or auto); raises LaunchRefused."""

    def multi_worker_refusal(self, options: WorkerOptions, world_size: int,
                             env: Mapping[str, str]) -> str | None:
        """Why `world_size` workers cannot run as decided (the message, with what works instead, in the words of the
        front end that started the launch: setting_names), or None."""
        return None

    def unsynchronized_warning(self, options: WorkerOptions, world_size: int) -> str | None:
        """The warning every process prints when the launch runs anyway with a known flaw, or None."""
        return None

    def launch_environment(self, *, gpu_count: int, debug: bool, debug_dir: str) -> dict[str, str]:
        """Variables every worker's environment needs for this backend (a launcher keeps any the user set)."""
        return {}

    def cache_copy(self, options: WorkerOptions, env: Mapping[str, str]) -> WorkingCopy | None:
        """The working copy the workers compile in (published_cache), for a backend whose cache must not be written
        in place; None when the workers use the cache folder itself (`env`: the container's environment)."""
        return None

    def follow_ups(self, *, debug: bool, debug_dir: str) -> list[FollowUp]:
        """On the launching host, after the workers ended (however): the commands that make what debug mode leaves
        besides the workers' own files. The launcher runs them under its stop handling and time bound."""
        return []

    def launch_notes(self, options: WorkerOptions, gpu_count: int, env: Mapping[str, str]) -> list[str]:
        """Lines for the job's log about this launch (`env`: the container's environment)."""
        return [f"{self.title} on {options.device} ({gpu_count} GPU(s) on this host)"]

    @abstractmethod
    def start(self, options: WorkerOptions, identity: WorkerIdentity, environ: MutableMapping[str, str],
              program: Program) -> WorkerSession:
        """In the worker, before `program` runs: prepare this process (its own environment included) and return the
        session the worker finishes after the script."""

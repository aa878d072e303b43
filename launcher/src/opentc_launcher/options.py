"""Worker options: what the launcher (or the SageMaker toolkit) decides for every worker.

They travel on the worker's command line (`python -m opentc_launcher.worker [options] script args`),
not through the launcher's own environment, so nothing is configured by mutating `os.environ`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields

from .env_values import MAX_DIGITS, whole_number
from .installed import default_compiler

# The compiler backends (opentc_launcher.backends has one object for each): eager is plain PyTorch, no compiler.
BACKEND_NAMES = ("eager", "xla", "inductor")
DEVICES = ("auto", "cuda", "cpu", "tpu")
CPU_MULTI_WORKER_POLICIES = ("refuse", "unsynchronized")


def _on_off(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "on", "1"):
        return True
    if value in ("false", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text}")


def _non_negative_int(text: str) -> int:
    value = whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (at most {MAX_DIGITS} digits), got {text!r}")
    return value


@dataclass(frozen=True)
class WorkerOptions:
    # The compiler: xla (PyTorch/XLA), inductor (torch.compile's TorchInductor), or eager (plain PyTorch). Default:
    # xla where torch-xla is installed, else inductor (opentc_launcher.installed).
    backend: str = field(default_factory=default_compiler)
    # auto = not decided yet (opentc_launcher.decision asks the backend: for xla PJRT_DEVICE, else cuda when a GPU
    # is visible, else cpu). Launchers pass the decided device to their workers.
    device: str = "auto"
    # What to do with several XLA:CPU workers, which cannot all-reduce across processes (xla only).
    cpu_multi_worker: str = "refuse"
    # Where each worker writes its compile report (JSON); empty = no report.
    compile_report_dir: str = ""
    # Persistent compilation cache root (a sub-folder per backend, version and device); empty = no persistent cache.
    compile_cache_dir: str = ""
    # Where the workers compile when their backend works on a copy of the cache (published_cache: inductor), a
    # folder of the launcher's own; empty = in compile_cache_dir itself. Other backends ignore it.
    compile_cache_work_dir: str = ""
    # Stop the worker once it has compiled more than this many graphs; 0 = no limit.
    max_compilations: int = 0
    # Steps (syncs) after which a new graph counts as a recompilation worth a warning.
    warmup_steps: int = 5
    # Version-guarded fixes for library code that mishandles XLA tensors (xla/library_patches.py; xla only).
    library_patches: bool = True
    # Where each worker writes what it measured (steps, step times, throughput, peak memory) for the job summary.
    summary_dir: str = ""

    def to_argv(self) -> list[str]:
        """The worker command-line options that reproduce these options."""
        argv: list[str] = []
        for f in fields(self):
            argv += [f"--{f.name.replace('_', '-')}", str(getattr(self, f.name))]
        return argv

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> WorkerOptions:
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the worker options to a parser (the worker's own, or opentc-run's)."""
    group = parser.add_argument_group("worker options")
    d = WorkerOptions()
    group.add_argument("--backend", choices=BACKEND_NAMES, default=d.backend,
                       help="xla: the script runs on PyTorch/XLA; inductor: torch.compile's TorchInductor, with its "
                            "cache, report and limit (torch_xla untouched); eager: plain PyTorch, no compiler "
                            "(default: xla where torch-xla is installed, else inductor)")
    group.add_argument("--device", choices=DEVICES, default=d.device,
                       help="auto: for xla PJRT_DEVICE if set, else cuda when a GPU is visible, else cpu")
    group.add_argument("--cpu-multi-worker", choices=CPU_MULTI_WORKER_POLICIES, default=d.cpu_multi_worker,
                       help="several XLA:CPU workers cannot all-reduce across processes: refuse to start "
                            "(default) or run them as unsynchronised replicas with a loud warning")
    group.add_argument("--compile-report-dir", default=d.compile_report_dir, metavar="DIR",
                       help="write each worker's compile report (JSON) into DIR")
    group.add_argument("--compile-cache-dir", default=d.compile_cache_dir, metavar="DIR",
                       help="persistent compilation cache root (a sub-folder per backend, version and device)")
    group.add_argument("--compile-cache-work-dir", default=d.compile_cache_work_dir, metavar="DIR",
                       help="compile in a copy of the cache kept in DIR, published back to --compile-cache-dir "
                            "after a successful job, for backends whose cache cannot survive a stop (inductor); "
                            "opentc-run makes one itself when this is not given")
    group.add_argument("--max-compilations", type=_non_negative_int, default=d.max_compilations, metavar="N",
                       help="stop with an error once a worker has compiled more than N graphs (inductor: captured "
                            "by Dynamo, cached or not; 0: no limit)")
    group.add_argument("--warmup-steps", type=_non_negative_int, default=d.warmup_steps, metavar="N",
                       help="graphs compiled after N steps are reported as recompilations")
    group.add_argument("--summary-dir", default=d.summary_dir, metavar="DIR",
                       help="write each worker's measurements (optimizer steps, step times, throughput from its "
                            "batches, peak memory) as JSON into DIR, for a job summary")
    group.add_argument("--library-patches", type=_on_off, default=d.library_patches, metavar="true|false",
                       help="apply the version-guarded fixes for libraries that mishandle XLA tensors (host reads "
                            "every step, saving, tied weights: library_patches.py); false: run them as installed")

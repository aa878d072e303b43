"""The worker options on a command line: opentc-run's and opentc-worker's parsers (the options themselves, and their
defaults, are WorkerOptions; the backends they name are the registry's)."""

from __future__ import annotations

import argparse

from .env_values import MAX_DIGITS, flag, whole_number
from .options import ALL_DEFAULTS, CPU_MULTI_WORKER_POLICIES, DEVICES, WorkerOptions
from .registry import BACKEND_NAMES, backend_named


def _on_off(text: str) -> bool:
    value = flag(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (at most {MAX_DIGITS} digits), got {text!r}")
    return value


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
    group.add_argument("--gpu-count", type=int, default=d.gpu_count, metavar="N",
                       help="the GPUs on this host, as a launcher above this one counted them (default -1: count "
                            "them here, through NVML, honouring CUDA_VISIBLE_DEVICES)")
    declared = "; ".join(f"{name}: {', '.join(backend_named(name).optional_defaults)}" for name in BACKEND_NAMES
                         if backend_named(name).optional_defaults)
    group.add_argument("--defaults-off", default=d.defaults_off, metavar="NAMES",
                       help=f"leave these compile-time defaults of the backend off: comma-separated names "
                            f"({declared}), or {ALL_DEFAULTS}")
    group.add_argument("--library-patches", type=_on_off, default=d.library_patches, metavar="true|false",
                       help="apply the version-guarded fixes for libraries that mishandle XLA tensors (host reads "
                            "every step, saving, tied weights: library_patches.py); false: run them as installed")

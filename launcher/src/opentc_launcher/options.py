"""Worker options: what the launcher (or the SageMaker toolkit) decides for every worker.

They travel on the worker's command line (`python -m opentc_launcher.worker [options] script args`),
not through the launcher's own environment, so nothing is configured by mutating `os.environ`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields

from .installed import default_compiler

DEVICES = ("auto", "cuda", "cpu", "tpu")
# What to do with several XLA:CPU workers (xla only); the first is the default.
CPU_MULTI_WORKER_POLICIES = ("refuse", "unsynchronized")
DEFAULT_CPU_MULTI_WORKER = CPU_MULTI_WORKER_POLICIES[0]
ALL_DEFAULTS = "all"   # --defaults-off all: every compile-time default of the backend off


def off_names(text: str) -> tuple[str, ...]:
    """The names in a --defaults-off value ("regional, vec-isa" reads as regional and vec_isa), in order, once."""
    names = (part.strip().lower().replace("-", "_") for part in text.split(","))
    return tuple(dict.fromkeys(name for name in names if name))


@dataclass(frozen=True)
class WorkerOptions:
    # The compiler: xla (PyTorch/XLA), inductor (torch.compile's TorchInductor), or eager (plain PyTorch). Default:
    # xla where torch-xla is installed, else inductor (opentc_launcher.installed).
    backend: str = field(default_factory=default_compiler)
    # auto = not decided yet (opentc_launcher.decision asks the backend: for xla PJRT_DEVICE, else cuda when a GPU
    # is visible, else cpu). Launchers pass the decided device to their workers.
    device: str = "auto"
    # What to do with several XLA:CPU workers, which cannot all-reduce across processes (xla only).
    cpu_multi_worker: str = DEFAULT_CPU_MULTI_WORKER
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
    # The GPUs on this host, as the outermost launcher counted them (gpus.visible_gpu_count), handed down so that every
    # process decides with the same count; -1: not counted yet, count here.
    gpu_count: int = -1
    # The backend's compile-time defaults to leave off: names it declares (CompilerBackend.optional_defaults), comma
    # separated, or "all"; empty: every default on.
    defaults_off: str = ""

    def gpus(self) -> int:
        """The GPU count handed down, else this process's own."""
        from .gpus import visible_gpu_count

        return self.gpu_count if self.gpu_count >= 0 else visible_gpu_count()

    def is_off(self, default: str) -> bool:
        """Whether the backend's compile-time default `default` was asked to stay off."""
        names = off_names(self.defaults_off)
        return ALL_DEFAULTS in names or default in names

    def to_argv(self) -> list[str]:
        """The worker command-line options that reproduce these options."""
        argv: list[str] = []
        for f in fields(self):
            argv += [f"--{f.name.replace('_', '-')}", str(getattr(self, f.name))]
        return argv

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> WorkerOptions:
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})

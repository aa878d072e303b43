"""Plain PyTorch, no compiler: what runs with Training Compiler off. torch_xla is never imported.

Its session counts the optimizer steps like every backend's; it compiles nothing, so it writes no compile report.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from .backend import CompilerBackend, cuda_or_cpu
from .identity import WorkerIdentity
from .options import WorkerOptions
from .plain_pytorch import library_environment
from .script import Program
from .worker_session import WorkerSession


class EagerBackend(CompilerBackend):
    name = "eager"
    title = "plain PyTorch (no compiler)"
    compiles = False

    def decide_device(self, requested: str, env: Mapping[str, str], gpu_count: int) -> str:
        return cuda_or_cpu(requested, gpu_count, "plain PyTorch", env)

    def launch_environment(self, *, gpu_count: int) -> dict[str, str]:
        return library_environment(gpu_count)

    def start(self, options: WorkerOptions, identity: WorkerIdentity, environ: MutableMapping[str, str],
              program: Program) -> WorkerSession:
        session = WorkerSession(options, identity, f"rank{identity.rank}")
        session.start()
        return session

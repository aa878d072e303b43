"""Plain PyTorch, no compiler: what runs with Training Compiler off. torch_xla is never imported.

Its session counts the optimizer steps like every backend's; it compiles nothing, so it writes no compile report.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from .backend import CompilerBackend, cuda_or_cpu
from .identity import WorkerIdentity
from .launch_context import LaunchContext
from .options import WorkerOptions
from .script import Program
from .worker_session import WorkerSession


def library_environment(gpu_count: int) -> dict[str, str]:
    """The libraries' switches for workers that run plain PyTorch (no torch_xla), whichever backend compiles them
    (this one and Inductor). transformers and accelerate take the XLA device whenever torch_xla imports, unless told
    not to. On a host with no GPU, accelerate's Accelerator() under torchrun sees no device it distributes over and
    sets up no process group (DistributedType.NO): each worker would train its own replica on the whole data set,
    never synchronised, saying nothing. ACCELERATE_USE_CPU makes it the data parallel job (MULTI_CPU, gloo) the user
    asked for; the Trainer's use_cpu says the same."""
    wanted = {"USE_TORCH_XLA": "0"}
    if gpu_count == 0:
        wanted["ACCELERATE_USE_CPU"] = "true"
    return wanted


class EagerBackend(CompilerBackend):
    name = "eager"
    title = "plain PyTorch (no compiler)"
    compiles = False

    def decide_device(self, requested: str, context: LaunchContext) -> str:
        return cuda_or_cpu(requested, context, "plain PyTorch")

    def launch_environment(self, context: LaunchContext) -> dict[str, str]:
        return library_environment(context.gpus)

    def start(self, options: WorkerOptions, identity: WorkerIdentity, environ: MutableMapping[str, str],
              program: Program) -> WorkerSession:
        session = WorkerSession(options, identity, f"rank{identity.rank}")
        session.start()
        return session

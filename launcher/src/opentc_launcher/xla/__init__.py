"""PyTorch/XLA (PJRT) as a compiler backend: what AWS's Training Compiler used, and the default.

Everything XLA-specific lives in this package: the PJRT device choice, the CPU multi-worker refusal, the XLA
variables, the worker's session (xla.session), its diagnostics, cache, library patches, the processes a script
starts with torch_xla.launch (xla.spawned), and XLA:CUDA's PJRT plugin (xla.cuda, xla.cuda_plugin).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from types import MappingProxyType

from ..backend import CompilerBackend, LaunchRefused, no_gpu_message
from ..compile_progress import DEFAULT_DOES as PROGRESS_DOES
from ..compile_progress import DEFAULT_NAME as PROGRESS
from ..identity import WorkerIdentity
from ..installed import has_module
from ..launch_context import LaunchContext
from ..options import WorkerOptions
from ..script import Program
from ..setting_names import COMPILER_OFF, ONE_WORKER_PER_HOST, setting
from ..worker_session import WorkerSession
from . import library_patches, loss_scaling, spawned
from .library_patches import PATCHES
from .named_settings import DEBUG_LOG, INDUCTOR_INSTEAD, LIBRARY_PATCHES_OFF, UNSYNCHRONIZED
from .session import PJRT_DEVICES, PROCESS_GROUP_KEPT, STEP_MARKER, XlaSession, debug_switches, pjrt_device


def patches_off_note(asked_by: str) -> str:
    """What the job runs without the library patches: every library they fix, and what torch's own lose (gradient
    checkpointing on XLA), from the patches themselves."""
    libraries = sorted({patch.module.split(".")[0] for patch in PATCHES})
    torch_own = [f"{patch.module}: {patch.unpatched}" for patch in PATCHES if patch.module.split(".")[0] == "torch"]
    return (f"library patches off ({asked_by}): {', '.join(libraries[:-1])} and {libraries[-1]} run as installed"
            + (f", torch's own included ({'; '.join(torch_own)})" if torch_own else ""))


def cpu_multi_worker_message(world_size: int) -> str:
    return (
        f"{world_size} workers on PJRT_DEVICE=CPU: torch-xla's CPU runtime has no cross-process collectives, "
        f"so every worker would train its own unsynchronised copy of the model (xm.optimizer_step and "
        f"xm.all_reduce do nothing across processes)."
    )


class XlaBackend(CompilerBackend):
    name = "xla"
    debug_log = DEBUG_LOG
    title = "PyTorch/XLA"
    optional_defaults = MappingProxyType({PROGRESS: PROGRESS_DOES})
    library_changes = (*library_patches.PATCHES, loss_scaling.CHANGE, STEP_MARKER, spawned.CHANGE, PROCESS_GROUP_KEPT)

    def missing(self) -> str | None:
        if has_module("torch_xla"):
            return None
        return "PyTorch/XLA (the torch-xla package) is not installed here"

    def decide_device(self, requested: str, context: LaunchContext) -> str:
        """An explicit choice, else PJRT_DEVICE, else cuda when a GPU is visible, else cpu."""
        env, gpu_count = context.env, context.gpus
        if requested == "auto":
            chosen = env.get("PJRT_DEVICE", "").strip().upper()
            if chosen and chosen not in PJRT_DEVICES.values():
                raise LaunchRefused(f"PJRT_DEVICE={env.get('PJRT_DEVICE')!r} is not accepted: use CUDA, CPU or TPU, "
                                    f"or leave it unset to use the GPUs when there are any, else the CPU.")
            requested = chosen.lower() or ("cuda" if gpu_count > 0 else "cpu")
        if requested not in PJRT_DEVICES:
            raise LaunchRefused(f"device {requested!r} is not accepted for PyTorch/XLA: use cuda, cpu or tpu.")
        if requested == "cuda" and gpu_count == 0:
            raise LaunchRefused(no_gpu_message("PJRT_DEVICE=CUDA", "XLA:CUDA"))
        return requested

    def multi_worker_refusal(self, options: WorkerOptions, context: LaunchContext) -> str | None:
        world_size, env = context.world_size, context.env
        if options.device != "cpu" or world_size <= 1 or options.cpu_multi_worker == "unsynchronized":
            return None
        return (
            cpu_multi_worker_message(world_size)
            + f" Accepted instead: GPUs (PJRT_DEVICE=CUDA, one worker per GPU); one worker"
            f" ({setting(ONE_WORKER_PER_HOST, env)}); the compiler off ({setting(COMPILER_OFF, env)}: plain"
            f" PyTorch, which can use gloo across processes); the Inductor backend"
            f" ({setting(INDUCTOR_INSTEAD, env)}, whose workers use gloo on CPUs); or, to test a launch only,"
            f" {setting(UNSYNCHRONIZED, env)}."
        )

    def unsynchronized_warning(self, options: WorkerOptions, world_size: int) -> str | None:
        if options.device != "cpu" or world_size <= 1:
            return None
        return ("WARNING: " + cpu_multi_worker_message(world_size)
                + " Running anyway because cpu-multi-worker=unsynchronized was requested:"
                " the replicas' weights WILL diverge. Use this to test a launch, never to train a model.")

    def debug_switches(self, folder: str, env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
        return debug_switches(folder, env)

    def launch_environment(self, context: LaunchContext) -> dict[str, str]:
        # transformers and accelerate take the XLA device only when told to.
        wanted = {"USE_TORCH_XLA": "1"}
        # torch_xla imports torch._inductor, whose import warms Inductor's compile-worker pool: a process that imports
        # torch and forks a worker per CPU (up to 32), in every rank, for a compiler an XLA job does not use (2.5 s of
        # CPU per rank on a 2-core machine). torch skips the warm-up unless TORCH_WARM_POOL is "1"; a script that does
        # compile with Inductor still gets the pool, started at its first compilation.
        wanted["TORCH_WARM_POOL"] = "0"
        if context.gpus > 0:
            wanted["GPU_NUM_DEVICES"] = str(context.gpus)   # as AWS's images set it
        # Debug mode's switches are not among these: each worker sets them in its own process (xla.session).
        return wanted

    def launch_notes(self, options: WorkerOptions, context: LaunchContext) -> list[str]:
        env = context.env
        notes = [f"PyTorch/XLA on PJRT_DEVICE={pjrt_device(options)} ({context.gpus} GPU(s) on this host)"]
        if options.device == "cuda":
            from .cuda import status_line

            notes.append(status_line())
        if not options.library_patches:
            notes.append(patches_off_note(setting(LIBRARY_PATCHES_OFF, env)))
        if "PJRT_DEVICE" in env:
            notes.append(f"Found pre-existing configuration PJRT_DEVICE={env['PJRT_DEVICE']}: keeping it")
        return notes

    def start(self, options: WorkerOptions, identity: WorkerIdentity, environ: MutableMapping[str, str],
              program: Program) -> WorkerSession:
        return XlaSession.prepare(options, identity, environ)

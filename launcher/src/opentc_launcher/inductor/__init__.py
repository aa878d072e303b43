"""torch.compile with TorchInductor as a compiler backend: PyTorch's own compiler, on CUDA GPUs and CPUs.

Workers are plain PyTorch processes (torch_xla is never imported; USE_TORCH_XLA=0). Trainer and Accelerate
scripts compile with no change: accelerate builds its TorchDynamoPlugin from ACCELERATE_DYNAMO_BACKEND when the
script gives none, and the Trainer passes None unless told otherwise. A plain script calls torch.compile itself.
The session (inductor.session) keeps the caches in the job's cache folder, counts what was compiled, captured
and loaded from the cache, names graph breaks and recompilations, and enforces the compilation limit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

from ..backend import CompilerBackend, FollowUp, cuda_or_cpu
from ..eager import library_environment
from ..env_values import keep_theirs
from ..identity import WorkerIdentity
from ..launch_context import LaunchContext
from ..options import WorkerOptions
from ..published_cache import WorkingCopy
from ..script import Program
from ..worker_session import WorkerSession
from . import regional
from .compile_time import OPTIONAL_DEFAULTS
from .named_settings import DEBUG_LOG
from .session import CACHE_VARIABLE, InductorSession, cache_folder_for
from .trace_report import TRACE_FOLDER, debug_environment, render_commands


class InductorBackend(CompilerBackend):
    name = "inductor"
    title = "torch.compile (TorchInductor)"
    optional_defaults = OPTIONAL_DEFAULTS
    debug_log = DEBUG_LOG
    library_changes = regional.CHANGES

    def decide_device(self, requested: str, context: LaunchContext) -> str:
        return cuda_or_cpu(requested, context, "TorchInductor")

    def launch_environment(self, context: LaunchContext) -> dict[str, str]:
        return {
            **library_environment(context.gpus),
            # accelerate's Accelerator() (and so the Trainer) compiles the model with this backend.
            "ACCELERATE_DYNAMO_BACKEND": "inductor",
        }

    def launch_notes(self, options: WorkerOptions, context: LaunchContext) -> list[str]:
        return [f"torch.compile (TorchInductor) on {options.device} ({context.gpus} GPU(s) on this host): Trainer "
                f"and Accelerate scripts compile by themselves (ACCELERATE_DYNAMO_BACKEND=inductor); a plain "
                f"script compiles what it passes to torch.compile"]

    def debug_switches(self, folder: str, env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
        return keep_theirs(debug_environment(folder), env)   # as the session settles them (InductorSession)

    def cache_copy(self, options: WorkerOptions, env: Mapping[str, str]) -> WorkingCopy | None:
        # gcc writes each kernel straight to its final name, and Inductor loads whatever is there: a stop during a
        # link would leave the cache damaged for every later job. A cache the user chose is theirs to manage.
        if not (options.compile_cache_dir and options.compile_cache_work_dir) or env.get(CACHE_VARIABLE):
            return None
        return WorkingCopy(published=cache_folder_for(options.compile_cache_dir, options.device),
                           working=cache_folder_for(options.compile_cache_work_dir, options.device))

    def follow_ups(self, *, debug: bool, debug_dir: str) -> list[FollowUp]:
        if not debug:
            return []
        return render_commands(os.path.join(debug_dir, TRACE_FOLDER), os.path.join(debug_dir, "tlparse"))

    def start(self, options: WorkerOptions, identity: WorkerIdentity, environ: MutableMapping[str, str],
              program: Program) -> WorkerSession:
        return InductorSession.prepare(options, identity, environ, program)

"""The environment a backend's workers need (CompilerBackend.launch_environment), merged with the one they start in.

Computed from the worker options alone, so every launch gets the same: `train`'s plan puts it in the workers'
command, and a worker applies what is still missing to its own process before its backend starts (worker.py), which
is how `opentc-run` and `opentc-worker` on their own get it: torch's elastic agent hands its workers its own
environment, which a launcher must not change. Applied twice, it changes nothing the second time. Debug mode's
switches are not part of it: the backend's session sets them in the worker's own process, from --debug-mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .launch_context import LaunchContext
from .options import WorkerOptions
from .registry import backend_named


@dataclass(frozen=True)
class EnvironmentChanges:
    """What the backend wants in the workers' environment, and what the environment had already decided."""

    applied: Mapping[str, str]
    kept: Mapping[str, str]          # name -> the value already set, which stays


def compiler_environment(options: WorkerOptions, context: LaunchContext) -> EnvironmentChanges:
    """The variables the workers need for `options.backend`; a variable the environment the launch starts from
    (`context.env`) already sets is kept, never overridden. The device is not among them: the launch decision is
    (decision.py)."""
    base_env = context.env
    wanted = backend_named(options.backend).launch_environment(context)
    applied = {k: v for k, v in wanted.items() if k not in base_env}
    kept = {k: base_env[k] for k in wanted if k in base_env and base_env[k] != wanted[k]}
    return EnvironmentChanges(applied=MappingProxyType(applied), kept=MappingProxyType(kept))

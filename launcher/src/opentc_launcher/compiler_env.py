"""The environment a backend's workers need (CompilerBackend.launch_environment), merged with the one they start in.

Computed from the worker options alone, so every launch gets the same: `train`'s plan puts it in the workers'
command, and a worker applies what is still missing to its own process before its backend starts (worker.py), which
is how `opentc-run` and `opentc-worker` on their own get it: torch's elastic agent hands its workers its own
environment, which a launcher must not change. Applied twice, it changes nothing the second time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .options import DEFAULT_DEBUG_FOLDER, WorkerOptions
from .registry import backend_named


@dataclass(frozen=True)
class EnvironmentChanges:
    """What the backend wants in the workers' environment, and what the environment had already decided."""

    applied: Mapping[str, str]
    kept: Mapping[str, str]          # name -> the value already set, which stays
    added_flags: Mapping[str, str] = field(default_factory=dict)   # name -> the flags added to a list already set


def debug_folder(options: WorkerOptions) -> str:
    return options.debug_dir or os.path.abspath(DEFAULT_DEBUG_FOLDER)


def compiler_environment(options: WorkerOptions, base_env: Mapping[str, str]) -> EnvironmentChanges:
    """The variables the workers need for `options.backend` (and its debug mode, `options.debug_mode`); a variable
    `base_env` already sets is kept, never overridden, except a list of flags (the backend's flag_list_variables:
    XLA_FLAGS), which gets the flags it lacks. The device is not among them: the launch decision is (decision.py)."""
    backend = backend_named(options.backend)
    wanted = backend.launch_environment(gpu_count=options.gpus(), debug=options.debug_mode,
                                        debug_dir=debug_folder(options))
    applied = {k: v for k, v in wanted.items() if k not in base_env}
    added: dict[str, str] = {}
    for name in backend.flag_list_variables & set(wanted) & set(base_env):
        extra = missing_flags(base_env[name], wanted[name])
        if extra:
            added[name] = extra
            applied[name] = f"{base_env[name].strip()} {extra}".strip()
    kept = {k: base_env[k] for k in wanted if k in base_env and k not in applied and base_env[k] != wanted[k]}
    return EnvironmentChanges(applied=MappingProxyType(applied), kept=MappingProxyType(kept),
                              added_flags=MappingProxyType(added))


def missing_flags(users: str, ours: str) -> str:
    """Our --name[=value] items whose name the user's list does not set, space-separated ('' when none)."""
    def name(item: str) -> str:
        return item.split("=", 1)[0]

    theirs = {name(item) for item in users.split()}
    return " ".join(item for item in ours.split() if name(item) not in theirs)

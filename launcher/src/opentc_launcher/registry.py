"""The compiler backends a launch can use, by name (the hyperparameter's and `--backend`'s words): the one list
every chooser reads, as Dynamo's list_backends() reads its registry."""

from __future__ import annotations

from .backend import CompilerBackend
from .eager import EagerBackend
from .inductor import InductorBackend
from .options import ALL_DEFAULTS, off_names
from .setting_names import Setting
from .text import shown
from .xla import XlaBackend

BACKENDS: dict[str, CompilerBackend] = {b.name: b for b in (EagerBackend(), XlaBackend(), InductorBackend())}
BACKEND_NAMES = tuple(BACKENDS)                                                   # --backend's choices
BACKEND_DEFAULTS = {name: backend.optional_defaults for name, backend in BACKENDS.items()}   # for the parsers
COMPILER_NAMES = tuple(name for name, backend in BACKENDS.items() if backend.compiles)   # the hyperparameter's


def backend_named(name: str) -> CompilerBackend:
    return BACKENDS[name]


def debug_logs() -> tuple[Setting, ...]:
    """Each backend's debug-mode log that its findings point to (CompilerBackend.debug_log)."""
    return tuple(backend.debug_log for backend in BACKENDS.values() if backend.debug_log is not None)


# Every compile-time default any backend has (CompilerBackend.optional_defaults): the names --defaults-off accepts,
# whatever the backend, so that a value gets the same answer with any compiler and with none (where a backend lacks
# a default, leaving it off does nothing).
DEFAULT_NAMES = tuple(dict.fromkeys(name for backend in BACKENDS.values() for name in backend.optional_defaults))
LISTED_CHARS = 60   # of the names a refusal quotes: what is accepted comes first, and stays in SageMaker's 1,024


def defaults_off_problem(text: str, option: str) -> str | None:
    """Why a --defaults-off value (comma-separated names, or "all") is not accepted, in words naming `option` (as the
    front end calls it), with what is accepted first; None when every name is one some backend has."""
    unknown = [name for name in off_names(text) if name != ALL_DEFAULTS and name not in DEFAULT_NAMES]
    if not unknown:
        return None
    listed = ""
    for count, name in enumerate(unknown):
        more = f"{shown(name, 30)}"
        if listed and len(listed) + len(more) > LISTED_CHARS:
            listed += f" and {len(unknown) - count} more"
            break
        listed += (", " if listed else "") + more
    return (f"{option} accepts the compile-time defaults to leave off, comma-separated: {', '.join(DEFAULT_NAMES)}, "
            f"or {ALL_DEFAULTS}; it names {listed}, which no backend has (the value: {shown(text)}).")

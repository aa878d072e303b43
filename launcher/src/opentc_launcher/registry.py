"""The compiler backends a launch can use, by name (the hyperparameter's and `--backend`'s words): the one list
every chooser reads, as Dynamo's list_backends() reads its registry."""

from __future__ import annotations

from .backend import CompilerBackend
from .eager import EagerBackend
from .inductor import InductorBackend
from .xla import XlaBackend

BACKENDS: dict[str, CompilerBackend] = {b.name: b for b in (EagerBackend(), XlaBackend(), InductorBackend())}
BACKEND_NAMES = tuple(BACKENDS)                                                   # --backend's choices
COMPILER_NAMES = tuple(name for name, backend in BACKENDS.items() if backend.compiles)   # the hyperparameter's


def backend_named(name: str) -> CompilerBackend:
    return BACKENDS[name]

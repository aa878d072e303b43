"""The compiler backends a launch can use, by name (the hyperparameter's and `--backend`'s words)."""

from __future__ import annotations

from .backend import CompilerBackend
from .eager import EagerBackend
from .inductor import InductorBackend
from .xla import XlaBackend

BACKENDS: dict[str, CompilerBackend] = {b.name: b for b in (EagerBackend(), XlaBackend(), InductorBackend())}


def backend_named(name: str) -> CompilerBackend:
    return BACKENDS[name]

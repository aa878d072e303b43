"""The worker options on a command line: opentc-run's and opentc-worker's parsers (the options themselves, and their
defaults, are WorkerOptions; the backends they name are the registry's)."""

from __future__ import annotations

import argparse
from typing import Any

from .env_values import MAX_DIGITS, flag, whole_number
from .options import BACKEND, CHOICE, FLAG, NUMBER, WHOLE, Declared, declared_options
from .registry import BACKEND_NAMES, backend_named


def _on_off(text: str) -> bool:
    value = flag(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (at most {MAX_DIGITS} digits), got {text!r}")
    return value


def _parsing(declared: Declared) -> dict[str, Any]:
    """argparse's arguments for a kind of option (options.Declared.kind)."""
    if declared.kind == BACKEND:
        return {"choices": BACKEND_NAMES}
    if declared.kind == CHOICE:
        return {"choices": declared.choices}
    return {"type": {FLAG: _on_off, WHOLE: _non_negative_int, NUMBER: int}.get(declared.kind, str)}


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the worker options to a parser (the worker's own, or opentc-run's), as WorkerOptions declares them: those
    of every backend in one group, each backend's own (Declared.backend) in a group of its own."""
    groups = {"": parser.add_argument_group("worker options")}
    declared_defaults = "; ".join(f"{name}: {', '.join(backend_named(name).optional_defaults)}"
                                  for name in BACKEND_NAMES if backend_named(name).optional_defaults)
    for name, declared, default in declared_options():
        if declared.backend not in groups:
            if declared.backend not in BACKEND_NAMES:
                raise ValueError(f"worker option {name} is declared for backend {declared.backend!r}, which is not "
                                 f"one of {', '.join(BACKEND_NAMES)}")
            groups[declared.backend] = parser.add_argument_group(
                f"worker options for --backend {declared.backend} only")
        groups[declared.backend].add_argument(
            f"--{name.replace('_', '-')}", default=default, metavar=declared.metavar,
            help=declared.help.replace("{declared}", declared_defaults), **_parsing(declared))

"""Running the user's script in this process, as `python script.py args` would."""

from __future__ import annotations

import ast
import os
import runpy
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Program:
    """What a worker runs: a script file (or, with `module`, a module name as `python -m` takes it) and its
    arguments."""

    target: str
    args: tuple[str, ...] = ()
    module: bool = False


def why_not_a_script(path: str) -> str | None:
    """None when `path` is a file Python can run; else what it is instead, in words."""
    if os.path.isfile(path):
        return None
    if os.path.isdir(path):
        return "is a folder, not a Python file"
    if os.path.islink(path):
        return f"is a symbolic link to {os.readlink(path)!r}, which does not exist"
    if os.path.lexists(path):
        return "is not a regular file"
    return "does not exist"


def has_main_guard(source: bytes) -> bool:
    """Whether the module has a top-level `if __name__ == "__main__":` block."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True  # let runpy raise the SyntaxError with its usual message
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = [node.test.left, *node.test.comparators]
            has_name = any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)
            has_main = any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names)
            if has_name and has_main:
                return True
    return False


def run_script(path: str, args: list[str], local_rank: int) -> None:
    """Run `path` as __main__ with `args` as its argv.

    Scripts written for xla_spawn (a `_mp_fn(index)` and no `__main__` block) get `_mp_fn(local_rank)`
    called, as xla_spawn did. Exceptions, SystemExit included, propagate to the caller.
    """
    path = os.path.abspath(path)
    sys.argv = [path, *args]
    # `python -m opentc_launcher.worker` put the working directory first on sys.path; `python script.py`
    # puts the script's folder there instead. Done only now, after every launcher import, so files in
    # the user's folder can never shadow the launcher's own modules.
    sys.path[0] = os.path.dirname(path)
    # Bytes, as Python reads a script: a PEP 263 coding line (`# -*- coding: latin-1 -*-`) decides the encoding.
    with open(path, "rb") as f:
        source = f.read()
    namespace = runpy.run_path(path, run_name="__main__")
    if not has_main_guard(source) and callable(namespace.get("_mp_fn")):
        namespace["_mp_fn"](local_rank)


def run_module(name: str, args: list[str]) -> None:
    """Run a module as `python -m name args` would."""
    sys.argv = [name, *args]
    sys.path[0] = os.getcwd()
    runpy.run_module(name, run_name="__main__", alter_sys=True)

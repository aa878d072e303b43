"""The background vector check (vec_isa.Prover starts it): torch's own check, each set at once, its proof kept.

`python -m opentc_launcher.inductor.vec_isa_prover FOLDER`, with the worker's environment, in the cache folder.

torch's check loads each set's test library in a fresh `python -c` (torch 2.7: one that imports torch, 2 s each on a
2-core CPU). This process imported torch already, so here that same load runs in this process instead: the same
library loaded after the same torch. A library whose load crashes takes this process with it: no proof is written,
and the worker runs torch's own check as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from ctypes import cdll
from types import SimpleNamespace
from typing import Any

from .vec_isa import machine_key, prove

NICENESS = 10   # the script's start goes first; this check takes the cores it leaves


def _is_load_probe(args: Any) -> bool:
    return (isinstance(args, Sequence) and len(args) == 3 and args[0] == sys.executable and args[1] == "-c"
            and "cdll.LoadLibrary(" in args[2])


def _load_here(args: Sequence[str]) -> None:
    """Run torch's probe (`from ctypes import cdll; cdll.LoadLibrary(path)`, with or without `import torch` first)
    in this process; a library that does not load is the probe's non-zero exit."""
    try:
        exec(compile(args[2], "<torch's vector-check probe>", "exec"), {"cdll": cdll})
    except OSError as e:
        raise subprocess.CalledProcessError(1, list(args)) from e


def _check_call(args: Any, *pargs: Any, **kwargs: Any) -> int:
    if _is_load_probe(args):
        _load_here(args)
        return 0
    return subprocess.check_call(args, *pargs, **kwargs)


def _run(args: Any, *pargs: Any, **kwargs: Any) -> subprocess.CompletedProcess:
    if _is_load_probe(args):
        _load_here(args)
        return subprocess.CompletedProcess(list(args), 0)
    return subprocess.run(args, *pargs, **kwargs)


def loads_here(module: Any) -> None:
    """`module`'s use of subprocess, with its library-load probes run in this process."""
    module.subprocess = SimpleNamespace(**{**vars(subprocess), "check_call": _check_call, "run": _run})


def main(argv: list[str]) -> int:
    folder = argv[0]
    os.nice(NICENESS)
    from torch._inductor import cpu_vec_isa

    loads_here(cpu_vec_isa)
    prove(folder, machine_key(os.environ), at_once=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The command lines that start the launcher and its workers.

They are the installed console scripts, started by absolute path: a console script has its own bin
folder as sys.path[0], so nothing in the user's working directory (the code folder) can shadow the
launcher's modules before it has imported them. `python -m` (which puts the working directory first)
is the fallback when the scripts are not installed beside the interpreter.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

# Facts of a launch that the toolkit's plan and opentc-run's own must agree on, written once.
DEFAULT_MASTER_PORT = 29500        # the rendezvous port when none is given: torchrun's own default
WORKING_CACHE = "compile-cache"    # in a run's scratch folder: the backend's working copy of the compilation cache


def _command(script: str, module: str, python: str) -> tuple[str, ...]:
    candidate = os.path.join(os.path.dirname(python), script)
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return (candidate,)
    return (python, "-m", module)


def worker_command(python: str = sys.executable) -> tuple[str, ...]:
    return _command("opentc-worker", "opentc_launcher.worker", python)


def run_command(python: str = sys.executable) -> tuple[str, ...]:
    return _command("opentc-run", "opentc_launcher.run", python)


@dataclass(frozen=True)
class Rendezvous:
    """Where the hosts of a multi-host launch meet (torchrun's c10d rendezvous on the first host)."""

    nodes: int
    node_rank: int
    master_addr: str
    master_port: int = DEFAULT_MASTER_PORT
    timeout: float = 300.0   # seconds to wait for every host


CACHE_COPY_OPENED = "--compile-cache-copy-opened"   # opentc-run's: the caller owns the working copy of the cache
AFTER_WORKERS_BY_CALLER = "--after-workers-by-caller"   # opentc-run's: the caller does what follows the workers


def run_argv(python: str, workers_per_host: int, *, failure_report: str, log_dir: str,
             rendezvous: Rendezvous | None = None, cache_copy_opened: bool = False) -> list[str]:
    """opentc-run's command line up to the worker options, for a front end that runs the after-workers step itself
    (after_workers.py): `workers_per_host` workers, on this host alone (a local rendezvous on a free port: a single
    host never resolves its own name) or meeting the others at `rendezvous`; `cache_copy_opened`: the caller opened
    the cache's working copy (--compile-cache-work-dir) and publishes it."""
    argv = [*run_command(python), "--nproc-per-node", str(workers_per_host), "--failure-report", failure_report,
            "--log-dir", log_dir, AFTER_WORKERS_BY_CALLER, *([CACHE_COPY_OPENED] if cache_copy_opened else [])]
    if rendezvous is None:
        return [*argv, "--standalone"]
    return [*argv, "--nnodes", str(rendezvous.nodes), "--node-rank", str(rendezvous.node_rank),
            "--master-addr", rendezvous.master_addr, "--master-port", str(rendezvous.master_port),
            "--rdzv-conf", f"timeout={max(1, int(rendezvous.timeout))}"]

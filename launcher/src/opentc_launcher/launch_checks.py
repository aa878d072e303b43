"""What can go wrong in `opentc-run` before any training script runs, named as what it is.

torchrun's own errors for these all look alike (an AssertionError for `--nproc-per-node 0`, a ValueError for a
port out of range, an OSError when the OS refuses a fork), and a rendezvous that a silent program answers
never ends. Here: options are checked before anything starts (exit code 2, naming the value), an exception from
the launch is classified (the OS refusing something, or the hosts never meeting), and a watchdog bounds the
wait for the rendezvous (exit code 3, naming the host and port).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import threading
import time
from collections.abc import Callable

from . import exit_codes
from .env_values import MAX_PORT, whole_number
from .text import shown

log = logging.getLogger("opentc_launcher")

# torchrun's --nproc-per-node words besides a number.
NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")
# torch's static rendezvous waits this long when --rdzv-conf gives no timeout (static_tcp_rendezvous.py).
DEFAULT_RENDEZVOUS_TIMEOUT = 600.0
# The watchdog fires this long after the rendezvous timeout, so torch's own, more precise error comes first.
WATCHDOG_MARGIN = 15.0


# A worker is a process with torch's threads of its own: a host runs one per GPU, or a few per CPU at most. Far more
# than that is no launch any host can run (78,000 log folders were made before the fork of 100,000 workers failed).
MAX_WORKERS_PER_CPU = 64


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # not Linux
        return os.cpu_count() or 1


def worker_limit(gpu_count: int) -> int:
    """The most workers one host may be asked to run."""
    return MAX_WORKERS_PER_CPU * max(usable_cpus(), gpu_count, 1)


def too_many_workers(workers: int, gpu_count: int, asked_by: str) -> str | None:
    """Why `workers` per host is no launch this host can run (asked for by `asked_by`), or None."""
    limit = worker_limit(gpu_count)
    if workers <= limit:
        return None
    return (f"{asked_by} asks for {workers} workers on this host, more than any host can run: each worker is a "
            f"process of its own, and this host has {usable_cpus()} CPU(s) and {gpu_count} GPU(s), so at most {limit} "
            f"({MAX_WORKERS_PER_CPU} per CPU or GPU) are accepted. Use one worker per GPU, or on CPUs one per core.")


def option_problem(args: argparse.Namespace, gpu_count: int) -> str | None:
    """The first launch option (or the variable it came from) that cannot work, in words; None if all can."""
    nproc = str(args.nproc_per_node).strip()
    if not (whole_number(nproc) or 0) >= 1 and nproc not in NPROC_WORDS:
        return (f"--nproc-per-node {shown(nproc)} is not accepted: use a whole number >= 1 (workers on this host), or "
                f"one of {', '.join(NPROC_WORDS)}.")
    too_many = too_many_workers(whole_number(nproc) or 1, gpu_count, f"--nproc-per-node {nproc}")
    if too_many:
        return too_many
    port = args.master_port
    if not isinstance(port, int) or not 1 <= port <= MAX_PORT:
        return f"--master-port {port!r} is not accepted: use a TCP port from 1 to {MAX_PORT}."
    if not args.standalone:
        try:
            _, high = _nnodes(str(args.nnodes))
        except ValueError:
            return (f"--nnodes {shown(args.nnodes)} is not accepted: use a whole number >= 1, or MIN:MAX with "
                    f"1 <= MIN <= MAX.")
        if not 0 <= int(args.node_rank) < high:
            return (f"--node-rank (or NODE_RANK) {args.node_rank} is not accepted: use 0 to {high - 1} for "
                    f"--nnodes {args.nnodes}.")
    work, cache = args.compile_cache_work_dir, args.compile_cache_dir
    if work and cache and os.path.realpath(work) == os.path.realpath(cache):
        # The copy would be compiled into the published cache, which is only ever replaced whole.
        return (f"--compile-cache-work-dir {shown(work)} is not accepted: it is --compile-cache-dir itself; use a "
                f"folder of its own for the working copy, or leave it out (opentc-run then makes one).")
    return None


def _nnodes(text: str) -> tuple[int, int]:
    parts = [whole_number(p) for p in text.split(":")]
    if len(parts) > 2 or None in parts:
        raise ValueError(text)
    low, high = parts[0] or 0, parts[-1] or 0
    if not 1 <= low <= high:
        raise ValueError(text)
    return low, high


def rendezvous_timeout(rdzv_conf: str) -> float:
    """The `timeout=N` of torchrun's --rdzv-conf (seconds), else torch's default."""
    for item in (rdzv_conf or "").split(","):
        key, _, value = item.partition("=")
        if key.strip() == "timeout":
            try:
                return float(value)
            except ValueError:
                break
    return DEFAULT_RENDEZVOUS_TIMEOUT


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError at the root of an exception, if there is one (torch wraps some)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError):
            return exc
        exc = exc.__cause__ or exc.__context__   # type: ignore[assignment]
    return None


def classify_launch_error(exc: BaseException, endpoint: str, node: str, workers: str) -> tuple[int, str]:
    """(exit code, message) for an exception that ended the launch before the workers' scripts could report:
    the OS refusing to start the workers, a rendezvous port already in use, or the hosts never meeting."""
    text = f"{type(exc).__name__}: {exc}"
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        return exit_codes.PEERS_UNREACHABLE, (
            f"the operating system refused the rendezvous port: {endpoint} is already in use by another program "
            f"({node}), so this host could not listen for the others. Set MASTER_PORT (or --master-port) to a "
            f"free port. ({text})")
    refused = _os_error(exc)
    if refused is not None and refused.errno in (errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE,
                                                 errno.E2BIG, errno.EPERM, errno.EACCES, errno.ENOEXEC):
        return exit_codes.BAD_INPUT, (
            f"the operating system refused to start the workers ({workers} on this host): "
            f"{type(refused).__name__}: {refused}. No training script ran to its end. A process or memory limit "
            f"is the usual cause: start fewer workers per host (OPENTC_WORKERS_PER_HOST, --nproc-per-node) or "
            f"raise the limit.")
    return exit_codes.PEERS_UNREACHABLE, f"rendezvous with {endpoint} failed ({node}): {text}"


class RendezvousWatchdog(threading.Thread):
    """Ends the launch with exit code 3 when no worker has started `seconds` after it began: a rendezvous that
    never completes (another program holds the port, accepts and never answers) must not wait forever.
    Disarmed for good once the first worker process exists."""

    def __init__(self, seconds: float, on_timeout: Callable[[float], None], interval: float = 0.5):
        super().__init__(daemon=True, name="opentc-rendezvous-watchdog")
        self.seconds = seconds
        self.on_timeout = on_timeout
        self.interval = interval
        self._done = threading.Event()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        deadline = time.monotonic() + self.seconds
        while not self._done.wait(self.interval):
            try:
                if me.children():
                    return
            except psutil.Error:
                return
            if time.monotonic() >= deadline:
                self.on_timeout(self.seconds)
                return

    def disarm(self) -> None:
        self._done.set()

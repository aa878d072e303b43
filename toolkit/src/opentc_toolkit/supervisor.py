"""Runs a command's process tree (the job's workers, or pip) and turns how it ended into a result.

- The launched process gets its own session; its stderr passes through here (a tail is kept for the
  failure file), and for the job's workers its stdout too (each line of both is read for the job summary). It
  dies with `train` (a parent-death signal), so a killed `train` leaves nothing running.
- SIGTERM, SIGINT or SIGHUP to `train` sends SIGTERM to every worker process (not to their helpers such as DataLoader
  workers, which end with their parent); after the grace period the whole tree gets SIGKILL.
- When the launched process ends, whatever it left behind is stopped: this process is made a child
  subreaper, so orphans are re-parented here and can be found.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import IO, TextIO

import psutil

from opentc_launcher.api import exit_codes
from opentc_launcher.common import PR_SET_CHILD_SUBREAPER, die_with_parent, prctl

from .not_started import BadInput

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 8192
LEFTOVER_GRACE = 3.0
# A process the script started may outlive it by a moment and then end by itself: Python's own helpers
# (multiprocessing's resource tracker and forkserver), a child still tearing down its memory after the script's
# end (slow under load), a DataLoader worker that checks for its parent every 5 s. Every one is given this long
# before it counts as left behind; the helpers are never reported.
EXIT_WAIT = 6.0
PYTHON_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class Command:
    """A process to run, and where a stop's SIGTERM goes."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    # False: SIGTERM goes to the launched process. True: it launches and manages the workers (opentc-run);
    # SIGTERM goes to its children, the workers, and it ends when they do.
    workers_are_children: bool = False


@dataclass(frozen=True)
class ProcessResult:
    exit_code: int
    stderr_tail: str
    stopped_by: int | None = None     # the signal that stopped the job, if one did
    grace: float = 0.0
    timed_out: bool = False           # killed because it outlasted the time it was given


class JobStopped(Exception):
    """A stop (SIGTERM) arrived while something other than the workers ran, such as pip."""

    def __init__(self, result: ProcessResult, processes: str, during: str):
        super().__init__(f"{processes} stopped {during}")
        self.result = result
        self.processes = processes
        self.during = during


class StartFailed(BadInput):
    """The operating system refused to start the command (its argv or environment)."""


LineReader = Callable[[str], None]


class _Pump(threading.Thread):
    """Copies one of the child's streams to ours as it comes, keeps its last bytes, and hands each complete line
    to `on_line` (the job summary reads the loss from them)."""

    def __init__(self, stream: IO[bytes], out: TextIO, on_line: LineReader | None = None) -> None:
        super().__init__(daemon=True, name="stream-pump")
        self._stream = stream
        self._out = getattr(out, "buffer", None)
        self._on_line = on_line
        self._tail = bytearray()
        self._partial = b""

    def run(self) -> None:
        out = self._out
        for chunk in iter(lambda: os.read(self._stream.fileno(), 65536), b""):
            if out is not None:
                try:
                    out.write(chunk)
                    out.flush()
                except OSError:  # our own stream is gone: keep the tail for the failure file anyway
                    out = None
            self._tail += chunk
            del self._tail[:-STDERR_TAIL_BYTES]
            if self._on_line is not None:
                self._lines(chunk)
        if self._on_line is not None and self._partial:
            self._lines(b"\n")

    def _lines(self, chunk: bytes) -> None:
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        self._partial = self._partial[-65536:]   # a line without an end is not kept forever
        for line in complete:
            with contextlib.suppress(Exception):   # reading a line is never a reason to stop copying
                self._on_line(line.decode("utf-8", errors="replace"))   # type: ignore[misc]

    @property
    def tail(self) -> str:
        return bytes(self._tail).decode("utf-8", errors="replace")




def _signal_all(processes: Iterable[psutil.Process], signum: int) -> None:
    for p in processes:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signum)


def _is_python_helper(process: psutil.Process) -> bool:
    try:
        return any(helper in part for part in process.cmdline() for helper in PYTHON_HELPERS)
    except psutil.Error:
        return False


class Supervisor:
    def __init__(self, grace: float):
        self.grace = grace
        self._stop_signal: int | None = None
        self._deadline: float | None = None
        self._root: psutil.Process | None = None
        self._workers_are_children = False

    # -- signals -------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """From now on SIGTERM, SIGINT and SIGHUP (a closed terminal or ssh session) stop the job, before the
        launch too (the launch is skipped). The workers always get SIGTERM, which the worker turns into an
        exception so the script's `finally` blocks run."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)

    @property
    def stop_requested(self) -> int | None:
        return self._stop_signal

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._stop_signal is not None:
            return
        self._stop_signal = signum
        self._deadline = time.monotonic() + self.grace
        log.warning("received %s: stopping the workers (SIGKILL in %g s if they are still running)",
                    signal.Signals(signum).name, self.grace)
        _signal_all(self._workers(), signal.SIGTERM)

    def _workers(self) -> list:
        """The processes a stop's SIGTERM goes to: the launched process, or its children under opentc-run
        (before opentc-run has started them, opentc-run itself, which then stops them as torchrun does)."""
        if self._root is None:
            return []
        try:
            return (self._root.children() or [self._root]) if self._workers_are_children else [self._root]
        except psutil.Error:
            return []

    # -- running -------------------------------------------------------------------------------
    def run(self, command: Command, on_line: LineReader | None = None, timeout: float | None = None) -> ProcessResult:
        """Run the command to its end (or to a stop); raises StartFailed when it cannot be started. `on_line` gets
        every line the command writes to stdout and stderr (both still pass through). With `timeout`, a command
        still running after that many seconds is killed (SIGKILL, with whatever it started)."""
        prctl(PR_SET_CHILD_SUBREAPER, 1)   # not Linux: orphans go to init, as usual
        me = psutil.Process()
        already_ours = {p.pid for p in me.children()}
        if self._stop_signal is not None:
            return ProcessResult(exit_codes.of_signal(self._stop_signal), "", self._stop_signal, self.grace)
        try:
            proc = subprocess.Popen(list(command.argv), env=dict(command.env), cwd=command.cwd,
                                    stdout=subprocess.PIPE if on_line else None, stderr=subprocess.PIPE,
                                    start_new_session=True, preexec_fn=die_with_parent)
        except (OSError, ValueError) as e:
            raise StartFailed(
                f"the operating system refused to start {os.path.basename(command.argv[0])}: "
                f"{type(e).__name__}: {e}. Its command line and environment carry the hyperparameters "
                f"(--name value, SM_HP_<NAME>, SM_HPS): a value too long for a command line (over 128 KiB) "
                f"or a name or value the OS cannot carry is the usual cause.") from None
        self._root = psutil.Process(proc.pid)
        self._workers_are_children = command.workers_are_children
        assert proc.stderr is not None   # stderr=PIPE
        pump = _Pump(proc.stderr, sys.stderr, on_line)
        pump.start()
        out_pump = _Pump(proc.stdout, sys.stdout, on_line) if on_line and proc.stdout is not None else None
        if out_pump is not None:
            out_pump.start()
        if self._stop_signal is not None:  # a signal between the check above and Popen
            _signal_all(self._workers(), signal.SIGTERM)
        killed = timed_out = False
        give_up = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                returncode = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if killed:
                continue
            if self._deadline is not None and time.monotonic() > self._deadline:
                assert self._stop_signal is not None
                log.error("workers still running %g s after %s: sending SIGKILL", self.grace,
                          signal.Signals(self._stop_signal).name)
                self._kill_tree(already_ours, signal.SIGKILL)
                killed = True
            elif give_up is not None and time.monotonic() > give_up:
                log.warning("%s still running after %g s: stopping it (SIGKILL)", os.path.basename(command.argv[0]),
                            timeout)
                self._kill_tree(already_ours, signal.SIGKILL)
                killed = timed_out = True
        self._stop_leftovers(already_ours)
        pump.join(timeout=5)
        if out_pump is not None:
            out_pump.join(timeout=5)
        self._root = None
        return ProcessResult(exit_codes.from_returncode(returncode), pump.tail, self._stop_signal, self.grace,
                             timed_out)

    def _descendants(self, exclude: set) -> list:
        try:
            mine = [p for p in psutil.Process().children() if p.pid not in exclude]
        except psutil.Error:
            return []
        found = []
        for p in mine:
            found.append(p)
            with contextlib.suppress(psutil.Error):
                found += p.children(recursive=True)
        return found

    def _kill_tree(self, exclude: set, signum: int) -> None:
        _signal_all(self._descendants(exclude), signum)

    def _stop_leftovers(self, exclude: set) -> None:
        """Processes the job left behind (re-parented here): SIGTERM, a short wait, then SIGKILL. Each gets a
        moment (EXIT_WAIT) to end by itself first: one that is ending as the check runs is not left behind. Python's
        own helpers are not reported when they do not end."""
        leftovers = self._descendants(exclude)
        if not leftovers:
            return
        _, running = psutil.wait_procs(leftovers, timeout=EXIT_WAIT)
        helpers = [p for p in running if _is_python_helper(p)]
        orphans = [p for p in running if _alive(p) and not _is_python_helper(p)]
        if orphans:
            log.warning("stopping %d process(es) the training left behind: %s", len(orphans),
                        ", ".join(f"{p.pid} ({_name(p)})" for p in orphans))
        remaining = orphans + helpers
        _signal_all(remaining, signal.SIGTERM)
        _, alive = psutil.wait_procs(remaining, timeout=LEFTOVER_GRACE)
        _signal_all(alive, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=LEFTOVER_GRACE)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _name(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())[:120] or process.name()
    except psutil.Error:
        return "?"

"""Runs the launch plan's process tree and turns how it ended into a result.

- The launched process gets its own session; its stderr passes through here (a tail is kept for the
  failure file).
- SIGTERM or SIGINT to `train` goes to every worker process (not to their helpers such as DataLoader
  workers, which end with their parent); after the grace period the whole tree gets SIGKILL.
- When the launched process ends, whatever it left behind is stopped: this process is made a child
  subreaper, so orphans are re-parented here and can be found.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import psutil
from opentc_launcher.errors import normalise_exit_code

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 8192
LEFTOVER_GRACE = 3.0
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ProcessResult:
    exit_code: int
    stderr_tail: str
    stopped_by: Optional[int] = None     # the signal that stopped the job, if one did
    grace: float = 0.0


class _StderrPump(threading.Thread):
    """Copies the child's stderr to ours as it comes and keeps the last bytes."""

    def __init__(self, stream):
        super().__init__(daemon=True, name="stderr-pump")
        self._stream = stream
        self._tail = bytearray()

    def run(self) -> None:
        out = getattr(sys.stderr, "buffer", None)
        for chunk in iter(lambda: os.read(self._stream.fileno(), 65536), b""):
            if out is not None:
                out.write(chunk)
                out.flush()
            self._tail += chunk
            del self._tail[:-STDERR_TAIL_BYTES]

    @property
    def tail(self) -> str:
        return bytes(self._tail).decode("utf-8", errors="replace")


def _become_subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans go to init, as usual
        pass


def _signal_all(processes, signum: int) -> None:
    for p in processes:
        try:
            p.send_signal(signum)
        except psutil.Error:
            pass


class Supervisor:
    def __init__(self, grace: float):
        self.grace = grace
        self._stop_signal: Optional[int] = None
        self._deadline: Optional[float] = None
        self._root: Optional[psutil.Process] = None
        self._workers_are_children = False

    # -- signals -------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """From now on SIGTERM/SIGINT stop the job (before the launch, too: the launch is skipped)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    @property
    def stop_requested(self) -> Optional[int]:
        return self._stop_signal

    def _on_signal(self, signum, _frame) -> None:
        if self._stop_signal is not None:
            return
        self._stop_signal = signum
        self._deadline = time.monotonic() + self.grace
        log.warning("received %s: stopping the workers (SIGKILL in %g s if they are still running)",
                    signal.Signals(signum).name, self.grace)
        _signal_all(self._workers(), signal.SIGTERM)

    def _workers(self) -> list:
        """The processes that run user scripts: the launched process, or its children under opentc-run
        (before opentc-run has started them, opentc-run itself, which then stops them as torchrun does)."""
        if self._root is None:
            return []
        try:
            return (self._root.children() or [self._root]) if self._workers_are_children else [self._root]
        except psutil.Error:
            return []

    # -- running -------------------------------------------------------------------------------
    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: str,
            workers_are_children: bool) -> ProcessResult:
        _become_subreaper()
        me = psutil.Process()
        already_ours = {p.pid for p in me.children()}
        if self._stop_signal is not None:
            return ProcessResult(128 + self._stop_signal, "", self._stop_signal, self.grace)
        proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stderr=subprocess.PIPE,
                                start_new_session=True)
        self._root = psutil.Process(proc.pid)
        self._workers_are_children = workers_are_children
        pump = _StderrPump(proc.stderr)
        pump.start()
        if self._stop_signal is not None:  # a signal between the check above and Popen
            _signal_all(self._workers(), signal.SIGTERM)
        killed = False
        while True:
            try:
                returncode = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if self._deadline is not None and time.monotonic() > self._deadline and not killed:
                log.error("workers still running %g s after %s: sending SIGKILL", self.grace,
                          signal.Signals(self._stop_signal).name)
                self._kill_tree(already_ours, signal.SIGKILL)
                killed = True
        self._stop_leftovers(already_ours)
        pump.join(timeout=5)
        self._root = None
        return ProcessResult(normalise_exit_code(returncode), pump.tail, self._stop_signal, self.grace)

    def _descendants(self, exclude: set) -> list:
        try:
            mine = [p for p in psutil.Process().children() if p.pid not in exclude]
        except psutil.Error:
            return []
        found = []
        for p in mine:
            found.append(p)
            try:
                found += p.children(recursive=True)
            except psutil.Error:
                pass
        return found

    def _kill_tree(self, exclude: set, signum: int) -> None:
        _signal_all(self._descendants(exclude), signum)

    def _stop_leftovers(self, exclude: set) -> None:
        """Processes the job left behind (re-parented here): SIGTERM, a short wait, then SIGKILL."""
        leftovers = self._descendants(exclude)
        if not leftovers:
            return
        log.warning("stopping %d process(es) the training left behind: %s", len(leftovers),
                    ", ".join(str(p.pid) for p in leftovers))
        _signal_all(leftovers, signal.SIGTERM)
        _, alive = psutil.wait_procs(leftovers, timeout=LEFTOVER_GRACE)
        _signal_all(alive, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=LEFTOVER_GRACE)

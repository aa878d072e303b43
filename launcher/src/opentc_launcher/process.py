"""The worker process's own set-up and how its end becomes an exit code, shared by the worker and by the
processes a script starts (xla.spawned), so neither has to import the other."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from typing import Any

from . import exit_codes

log = logging.getLogger("opentc_launcher")


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM so the script's `finally` blocks and context managers run.

    A BaseException, so a script's `except Exception` does not swallow it.
    """

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StoppedWithExitCode(BaseException):
    """A process stopped itself for a reason of the launcher's (a compilation limit in a process the script
    started): the worker ends with this exit code and this reason."""

    def __init__(self, exit_code: int, summary: str):
        super().__init__(summary)
        self.exit_code = exit_code
        self.summary = summary


PR_SET_PDEATHSIG = 1          # prctl(2): the signal this process gets when its parent dies
PR_SET_CHILD_SUBREAPER = 36   # prctl(2): orphans of this process's descendants are re-parented to it


def prctl(option: int, value: int) -> bool:
    """Linux's prctl(2) with one argument; False where there is none (not Linux)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent() -> bool:
    """SIGKILL this process when its parent dies (`train` or opentc-run killed with SIGKILL, say), so nothing is
    ever left running on its own; a normal stop still reaches it as SIGTERM first. False where that cannot be armed.
    Safe between fork and exec (a child's preexec_fn): it only calls prctl."""
    return prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


REDELIVERY_DELAY = 0.05   # seconds: past the hook, which a signal must not land in (its own errors are dropped too)


def _deliver_again(previous_hook: Any) -> Any:
    """sys.unraisablehook that hands a dropped stop back to the main thread.

    A signal handler runs wherever the main thread is. When that is a weakref callback (Dynamo's guard dictionaries
    have many), a __del__ or a garbage-collector callback, Python cannot raise there: it prints "Exception ignored"
    and drops the exception, and the script would train on to its end as if never stopped. So when Python reports a
    Terminated as unraisable, the same signal is sent to the main thread again a moment later, and again if that
    one lands in such a callback too, until the script has it. A stop that was raised is never repeated, so a
    script's `finally` blocks run undisturbed."""
    said: list[bool] = []

    def hook(unraisable: Any) -> None:
        stop = unraisable.exc_value
        if not isinstance(stop, Terminated):
            previous_hook(unraisable)
            return
        if not said:
            said.append(True)
            where = getattr(unraisable.object, "__qualname__", None) or type(unraisable.object).__name__
            log.info("%s landed where Python cannot raise it (in %s, called by the interpreter): delivered again",
                     signal.Signals(stop.signum).name, where)
        timer = threading.Timer(REDELIVERY_DELAY, signal.pthread_kill,
                                args=(threading.main_thread().ident, stop.signum))
        timer.daemon = True
        timer.start()

    return hook


def _hold_stops_across_fork() -> None:
    """Before the script forks: SIGTERM waits (blocked in the forking thread, whose mask the child inherits) until
    each side has the disposition it needs (_after_fork_in_child, _after_fork_in_parent)."""
    if signal.getsignal(signal.SIGTERM) is _raise_terminated:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _after_fork_in_child() -> None:
    """In a child the script forks (a multiprocessing pool's worker, datasets.map(num_proc=N), a DataLoader worker),
    SIGTERM ends the process again, as its parent expects: Pool.terminate() stops its workers with SIGTERM. A worker
    that raised Terminated instead could die holding the pool's queue lock and leave a sibling waiting on it
    forever; and a SIGTERM that reached a child before its disposition changed was dropped by Python ("ignored due
    to race condition"), leaving a pool worker that terminate() could not end. So the default is set while SIGTERM is
    still blocked, and a SIGTERM that came meanwhile is taken with the default once unblocked."""
    if signal.getsignal(signal.SIGTERM) is _raise_terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _after_fork_in_parent() -> None:
    if signal.getsignal(signal.SIGTERM) is _raise_terminated:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})   # a stop that came meanwhile is raised now


def raise_terminated_on_stop() -> None:
    """SIGTERM raises Terminated in the main thread (see Terminated), delivered until the script has it; only where
    the process's own code has not already decided what SIGTERM does, and only in this process: a child it forks gets
    SIGTERM's default back (_after_fork_in_child)."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    sys.unraisablehook = _deliver_again(sys.unraisablehook)
    os.register_at_fork(before=_hold_stops_across_fork, after_in_child=_after_fork_in_child,
                        after_in_parent=_after_fork_in_parent)


def configure_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[opentc-launcher] %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def exit_code_of(exc: BaseException) -> int:
    """The exit code Python itself would give for an exception that ended the script."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return exit_codes.OK
        if isinstance(code, int):
            return code & 0xFF
        return exit_codes.FAILED  # a message: Python prints it and exits 1
    if isinstance(exc, Terminated):
        return exit_codes.of_signal(exc.signum)
    if isinstance(exc, StoppedWithExitCode):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return exit_codes.of_signal(signal.SIGINT)
    return exit_codes.FAILED

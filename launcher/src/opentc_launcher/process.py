"""The worker process's own set-up and how its end becomes an exit code, shared by the worker and by the
processes a script starts (xla.spawned), so neither has to import the other."""

from __future__ import annotations

import logging
import signal
import sys

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

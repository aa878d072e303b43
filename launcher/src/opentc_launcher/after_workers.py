"""What runs on the launching host after the workers ended: debug mode's reports (the backend's follow-up commands:
tlparse's report of each torch.compile trace) and, after a success, the working copy of the compilation cache
published. One step for every front end: `opentc-run` on its own runs it after its workers, and the SageMaker
toolkit after its launch (wrap_up.py: within OPENTC_FINISH_TIMEOUT, each command a supervised process that a stop
reaches like a worker). Each gives its way of running a command and of telling that the launch is stopping; the
step says what it was doing (`during`), for a stop that arrives meanwhile. Anything that goes wrong here is logged:
the launch's outcome is the workers'.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .backend import FollowUp
from .options import WorkerOptions
from .published_cache import WorkingCopy
from .registry import backend_named
from .text import tail
from .working_cache import publish_working_copy

log = logging.getLogger("opentc_launcher")

FINISHING = "while the job was finishing"
PUBLISHED = "once the compilation cache was published"   # `during` once the publication is done


class CommandNotStarted(Exception):
    """A follow-up command could not be started (not found, not executable); the message says why."""


# How a front end runs a follow-up command: (its exit code, the end of its stderr), within the seconds given (None:
# no bound); CommandNotStarted when it cannot start.
RunCommand = Callable[[FollowUp, float | None], tuple[int, str]]


def run_here(follow_up: FollowUp, seconds: float | None) -> tuple[int, str]:
    """A follow-up as a child of this process, its output to this one's, its stderr kept for the log; killed when this
    process is stopped (subprocess.run kills it on the way out) or past `seconds`."""
    try:
        done = subprocess.run(list(follow_up.argv), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              errors="replace", timeout=seconds, check=False)
    except OSError as e:
        raise CommandNotStarted(f"{follow_up.argv[0]}: {e.strerror or e}") from None
    except subprocess.TimeoutExpired:
        log.warning("%s: still running after %.0f s, left unfinished", follow_up.argv[0], seconds or 0)
        return -1, "timed out"
    return done.returncode, tail(done.stderr or "")


def within(seconds: float | None, work: Callable[[], str], what: str,
           passes: tuple[type[BaseException], ...] = ()) -> bool:
    """Run `work` (which returns a line for the log) for at most `seconds`, in a thread; with no bound (None), in
    this one, where a stop (one of `passes`) ends it as it ends anything this process does. Log whatever else it
    raised. Whether it ended in time (having worked or failed)."""
    said: list[str] = []
    failed: list[BaseException] = []
    if seconds is None:
        try:
            said.append(work())
        except passes:
            raise
        except Exception as e:  # noqa: BLE001  (logged: the launch's outcome does not depend on it)
            failed.append(e)
        _log_result(what, said, failed)
        return True

    def run() -> None:
        try:
            said.append(work())
        except Exception as e:  # noqa: BLE001  (logged: the launch's outcome does not depend on it)
            failed.append(e)

    thread = threading.Thread(target=run, daemon=True, name=f"opentc-{what}")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        log.warning("%s: still running after %.0f s, left unfinished", what, seconds)
        return False
    _log_result(what, said, failed)
    return True


def _log_result(what: str, said: list[str], failed: list[BaseException]) -> None:
    if failed:
        log.warning("%s failed: %s: %s", what, type(failed[0]).__name__, failed[0])
    elif said:
        log.info("%s: %s", what, said[0])


@dataclass
class AfterWorkers:
    """The step for one launch: `options` are the workers' (debug mode and its folder, the backend), `cache` the
    working copy this launcher publishes (None when it has none, or another launcher above publishes it)."""

    options: WorkerOptions
    cache: WorkingCopy | None
    run_command: RunCommand = run_here
    stopping: Callable[[], bool] = lambda: False
    seconds: float | None = None     # for the whole step; None: no bound (the work runs in this thread)
    stops: tuple[type[BaseException], ...] = ()   # what a stop raises in this thread: it passes through the step
    during: str = FINISHING          # what the step is doing now, in words, for a stop that arrives meanwhile

    def run(self, succeeded: bool) -> None:
        """The reports (however the workers ended), then the publication (after a success)."""
        deadline = None if self.seconds is None else time.monotonic() + self.seconds
        for follow_up in backend_named(self.options.backend).follow_ups(debug=self.options.debug_mode,
                                                                        debug_dir=self.options.debug_folder()):
            left = None if deadline is None else deadline - time.monotonic()
            stopping = self.stopping()
            if stopping or (left is not None and left <= 0):
                log.warning("debug mode: %s skipped (%s)", follow_up.what, "the job is stopping" if stopping
                            else f"over the {self.seconds:.0f} s the job's finish may take")
                continue
            self.during = f"while {follow_up.what} was being made"
            try:
                exit_code, stderr = self.run_command(follow_up, left)
            except CommandNotStarted as e:
                log.warning("debug mode: %s could not be made (%s)", follow_up.what, e)
                continue
            problem = follow_up.outcome(exit_code, stderr)
            if problem is None:
                log.info("debug mode: %s: %s", follow_up.what, follow_up.product)
            else:
                log.warning("debug mode: %s could not be made (%s)", follow_up.what, problem)
        cache = self.cache
        if cache is None:
            return
        if not succeeded:
            log.info("compilation cache: %s left as it was (only a successful job publishes its cache)",
                     cache.published)
            return
        if self.stopping():
            return
        self.during = f"while the compilation cache was being published to {cache.published}"
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ended = within(left, partial(publish_working_copy, cache, self.stopping), "compilation cache", self.stops)
        if ended and not self.stopping():   # a stop from now on came after the publication
            self.during = PUBLISHED

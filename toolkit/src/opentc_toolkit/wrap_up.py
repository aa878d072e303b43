"""What runs on this host after the workers ended, before the verdict: the compiler's follow-up commands (debug
mode's reports) and, after a success, publishing the working copy of the compilation cache.

It runs under the job's stop handling (each follow-up command is a supervised process, which a stop reaches like a
worker) and within one overall bound (OPENTC_FINISH_TIMEOUT: LaunchSettings.finish_timeout). Anything that goes
wrong here is logged and never costs the job its verdict. A stop that arrives now still ends the job as stopped
(`settle`): a job whose script had succeeded is reported as stopped, since the platform asked for it to end before
it was done; a job that had failed keeps its failure, which says more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial

from opentc_launcher.api import WorkingCopy, publish_working_copy

from .job_summary import JobRecorder
from .not_started import BadInput
from .outcome import Outcome, stopped_after_the_workers
from .supervisor import Command, Supervisor

log = logging.getLogger(__name__)

PUBLISHED = "once the compilation cache was published"   # `during` for a stop that came after the publication


def settle(outcome: Outcome, supervisor: Supervisor, during: str) -> Outcome:
    """The outcome once a stop that arrived after the workers ended is taken into account."""
    signum = supervisor.stop_requested
    if signum is None or outcome.stopped or not outcome.succeeded:
        return outcome
    return stopped_after_the_workers(signum, during, cut_short=during != PUBLISHED)


def _within(seconds: float, work: Callable[[], str], what: str) -> bool:
    """Run `work` (which returns a line for the log) in a thread for at most `seconds`; log whatever it raised.
    Whether it ended in time (having worked or failed)."""
    said: list[str] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            said.append(work())
        except Exception as e:  # noqa: BLE001  (logged: the job's verdict does not depend on it)
            failed.append(e)

    thread = threading.Thread(target=run, daemon=True, name=f"opentc-{what}")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        log.warning("%s: still running after %.0f s, left unfinished", what, seconds)
        return False
    if failed:
        log.warning("%s failed: %s: %s", what, type(failed[0]).__name__, failed[0])
    elif said:
        log.info("%s: %s", what, said[0])
    return True


def wrap_up(outcome: Outcome, recorder: JobRecorder, supervisor: Supervisor, base_env: Mapping[str, str],
            seconds: float) -> Outcome:
    """The work after the workers, within `seconds`; the outcome it leaves (see the module's docstring)."""
    deadline = time.monotonic() + seconds
    during = "while the job was finishing"
    settings, job = recorder.settings, recorder.job
    try:
        if settings is not None and job is not None and recorder.plan is not None:
            options = recorder.plan.options
            for follow_up in settings.backend.follow_ups(debug=options.debug_mode, debug_dir=options.debug_dir):
                left = deadline - time.monotonic()
                if supervisor.stop_requested is not None or left <= 0:
                    log.warning("debug mode: %s skipped (%s)", follow_up.what,
                                "the job is stopping" if left > 0 else f"over the {seconds:.0f} s the job's finish "
                                                                       f"may take")
                    continue
                during = f"while {follow_up.what} was being made"
                try:
                    result = supervisor.run(Command(argv=follow_up.argv, env=dict(base_env), cwd=job.paths.base),
                                            timeout=left)
                except BadInput as e:   # the command could not be started
                    log.warning("debug mode: %s could not be made (%s)", follow_up.what, e)
                    continue
                problem = follow_up.outcome(result.exit_code, result.stderr_tail)
                if problem is None:
                    log.info("debug mode: %s: %s", follow_up.what, follow_up.product)
                else:
                    log.warning("debug mode: %s could not be made (%s)", follow_up.what, problem)
        cache: WorkingCopy | None = recorder.cache
        if cache is not None:
            if outcome.succeeded and supervisor.stop_requested is None:
                during = f"while the compilation cache was being published to {cache.published}"
                ended = _within(max(0.0, deadline - time.monotonic()),
                                partial(publish_working_copy, cache, lambda: supervisor.stop_requested is not None),
                                "compilation cache")
                if ended and supervisor.stop_requested is None:   # a stop from now on came after the publication
                    during = PUBLISHED
            elif not outcome.succeeded:
                log.info("compilation cache: %s left as it was (only a successful job publishes its cache)",
                         cache.published)
    except Exception as e:  # noqa: BLE001  (nothing after the workers may cost the job its verdict)
        log.warning("finishing the job failed: %s: %s", type(e).__name__, e)
    return settle(outcome, supervisor, during)

"""What runs on this host after the workers ended, before the verdict: the launcher's after-workers step
(opentc_launcher's AfterWorkers: debug mode's reports, and after a success the working copy of the compilation cache
published, the step `opentc-run` takes after its own workers), run here under the job's stop handling (each report
command is a supervised process, which a stop reaches like a worker) and within one overall bound
(OPENTC_FINISH_TIMEOUT: LaunchSettings.finish_timeout). Anything that goes wrong here is logged and never costs the
job its verdict. A stop that arrives now still ends the job as stopped (`settle`): a job whose script had succeeded is
reported as stopped, since the platform asked for it to end before it was done; a job that had failed keeps its
failure, which says more.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from opentc_launcher.api import (
    AFTER_WORKERS_FINISHING,
    AFTER_WORKERS_PUBLISHED,
    AfterWorkers,
    CommandNotStarted,
    FollowUp,
)

from .job_summary import JobRecorder
from .not_started import BadInput
from .outcome import Outcome, stopped_after_the_workers
from .supervisor import Command, Supervisor

log = logging.getLogger(__name__)

PUBLISHED = AFTER_WORKERS_PUBLISHED   # `during` for a stop that came after the publication


def settle(outcome: Outcome, supervisor: Supervisor, during: str) -> Outcome:
    """The outcome once a stop that arrived after the workers ended is taken into account."""
    signum = supervisor.stop_requested
    if signum is None or outcome.stopped or not outcome.succeeded:
        return outcome
    return stopped_after_the_workers(signum, during, cut_short=during != PUBLISHED)


def wrap_up(outcome: Outcome, recorder: JobRecorder, supervisor: Supervisor, base_env: Mapping[str, str],
            seconds: float) -> Outcome:
    """The work after the workers, within `seconds`; the outcome it leaves (see the module's docstring)."""
    during = AFTER_WORKERS_FINISHING
    job, plan = recorder.job, recorder.plan
    if plan is None:   # the job never got as far as a launch: nothing to finish
        return settle(outcome, supervisor, during)

    def supervised(follow_up: FollowUp, left: float | None) -> tuple[int, str]:
        cwd = job.paths.base if job is not None else "."
        try:
            result = supervisor.run(Command(argv=follow_up.argv, env=dict(base_env), cwd=cwd), timeout=left)
        except BadInput as e:   # the command could not be started
            raise CommandNotStarted(str(e)) from None
        return result.exit_code, result.stderr_tail

    step = AfterWorkers(plan.options, recorder.cache, supervised, lambda: supervisor.stop_requested is not None,
                        seconds)
    try:
        step.run(outcome.succeeded)
    except Exception as e:  # noqa: BLE001  (nothing after the workers may cost the job its verdict)
        log.warning("finishing the job failed: %s: %s", type(e).__name__, e)
    return settle(outcome, supervisor, step.during)

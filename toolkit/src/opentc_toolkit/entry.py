"""`train` in the image, `opentc-train [JOB_DIR]` anywhere: one training job, from its files to its verdict.

    job files -> read_job -> TrainingJob -> JobSettings -> build_plan -> LaunchPlan
              -> Supervisor.run -> judge -> Outcome -> wrap_up -> write_summary
              -> report (output/success or output/failure, exit code) -> wait_for_every_host

`--dry-run` stops at the plan and prints it (dry_run.py).

This entry reads the job itself, so a missing or malformed job file is a clear failure and never an exit 0.
sagemaker-training's `train` with SAGEMAKER_TRAINING_MODULE=opentc_toolkit.entry:main also lands here, once
sagemaker-training has read the job; the process then ends with the job's own exit code (os._exit), so the
trainer's `finally`, which exits 0 whenever its own bookkeeping fails, cannot replace it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Mapping
from dataclasses import replace
from typing import NoReturn

from opentc_launcher.api import exit_codes, open_working_copy

from .distributions import TORCH_DISTRIBUTED
from .dry_run import dry_run
from .hosts_end import end_port, wait_for_every_host
from .job import JobPaths, TrainingJob
from .job_settings import BACKEND, DEBUG, DEFAULTS_OFF, ENABLED, MULTI_WORKER, JobSettings
from .job_summary import JobRecorder, write_summary
from .not_started import JobNotStarted, PeersUnreachable
from .outcome import (
    Outcome,
    OutcomeKind,
    clear_verdict,
    judge,
    not_started,
    report,
    stop_outcome,
    stopped_before_the_script,
)
from .peers import wait_for_hosts
from .plan import LaunchPlan, LaunchSettings, plan_job
from .requirements_install import install_requirements
from .source import FetchStopped
from .supervisor import JobStopped, Supervisor
from .wrap_up import settle, wrap_up

log = logging.getLogger("opentc_toolkit")

DEFAULT_BASE_DIR = "/opt/ml"


def announce(job: TrainingJob, settings: JobSettings, plan: LaunchPlan, base_env: Mapping[str, str]) -> None:
    if settings.enabled:
        log.info("Found configuration for Training Compiler")
        log.info("Configuring SM Training Compiler... (%s)", settings.backend_note())
        for note in settings.backend.launch_notes(plan.options, plan.context):
            log.info("%s", note)
        if settings.debug:
            log.info("Training Compiler set to debug mode. This may impact performance. "
                     "Debug artifacts will be saved in %s", job.paths.compiler_output)
    else:
        log.info("Training Compiler is off (%s): plain PyTorch, USE_TORCH_XLA=%s",
                 f"{ENABLED}=false" if ENABLED in job.framework_params else f"{ENABLED} not set",
                 plan.command.env.get("USE_TORCH_XLA"))
        if settings.debug:
            log.warning("%s is ignored: the compiler is off", DEBUG)
        if BACKEND in job.framework_params:
            log.warning("%s is ignored: the compiler is off (%s=true turns it on)", BACKEND, ENABLED)
    defaults_off = settings.worker.defaults_off
    if defaults_off and not (settings.enabled and settings.backend.optional_defaults):
        why = f"{settings.backend.title} has no compile-time defaults" if settings.enabled else "the compiler is off"
        log.info("%s=%s leaves nothing off here: %s", DEFAULTS_OFF, defaults_off, why)
    for name, value in plan.kept_variables.items():
        log.info("Found pre-existing configuration %s=%s: keeping it", name, value)
    for name, value in sorted(plan.replaced_variables.items()):
        new = plan.command.env.get(name)
        log.warning("Found pre-existing %s=%s: %s, because it describes this job, which the toolkit decides from "
                    "the job's files and its launch plan", name, value,
                    f"replaced by {name}={new}" if new is not None else "not passed on")
    if job.is_multi_host and not settings.multi_worker:
        env = plan.command.env
        log.info("%d hosts and neither %s nor %s is on: one process on each host, as SageMaker's PyTorch images run "
                 "such a job. The script meets the other hosts itself with "
                 "init_process_group(backend, rank=hosts.index(current_host), world_size=len(hosts)): MASTER_ADDR=%s "
                 "and MASTER_PORT=%s are set, this host is rank %d of %d (its place in SM_HOSTS); a script that "
                 "does not trains on each host on its own (the job summary says so). %s=true starts one worker per "
                 "GPU on every host, in one world", len(job.hosts), TORCH_DISTRIBUTED, MULTI_WORKER,
                 env.get("MASTER_ADDR"), env.get("MASTER_PORT"), job.host_index, len(job.hosts), TORCH_DISTRIBUTED)
    for note in settings.distribution_notes:
        log.info("%s", note)
    world = plan.world
    if settings.multi_worker:
        log.info("launching %d worker(s) on this host (node %d of %d, rendezvous on %s; asked by %s): %s",
                 world.workers_per_host, world.node_rank, world.nodes, world.master_addr,
                 " and ".join(settings.multi_worker_asked_by) or "the job",
                 list(plan.command.argv))
    else:
        log.info("launching one worker: %s", list(plan.command.argv))


def run_job(paths: JobPaths, launch: LaunchSettings, base_env: Mapping[str, str], supervisor: Supervisor,
            scratch: str, recorder: JobRecorder) -> Outcome:
    """Read the job, prepare its code, plan the launch, run it, and judge how it ended; `recorder` learns what
    the job is and reads the workers' lines, for the job summary."""
    def noted(job: TrainingJob, settings: JobSettings | None) -> None:
        recorder.job = job
        if settings is not None:
            recorder.settings = settings

    def stopping() -> bool:
        return supervisor.stop_requested is not None

    try:
        planned = plan_job(paths, launch, base_env, scratch, noted, stopped=stopping)
        job, settings, code, plan = planned.job, planned.settings, planned.code, planned.plan
        recorder.plan = plan
        announce(job, settings, plan, base_env)
        install_requirements(code, supervisor, base_env, scratch, job.requirements_file)
        recorder.cache = open_working_copy(plan.options, base_env, stopped=stopping)
        wait_for_hosts(plan.peers, launch.peer_timeout, stopped=stopping)
        result = supervisor.run(plan.command, on_line=recorder.lines.feed)
        return judge(result, plan.failure_source, job.current_host, plan.world.size)
    except JobNotStarted as e:   # bad input, requirements that did not install, peers that never met
        return replace(not_started(str(e), e.exit_code), hosts_never_met=isinstance(e, PeersUnreachable))
    except JobStopped as e:
        return stop_outcome(e.result, e.processes, e.during)
    except FetchStopped as e:
        assert supervisor.stop_requested is not None   # FetchStopped is raised only then
        return stopped_before_the_script(supervisor.stop_requested, e.during)
    except Exception as e:  # noqa: BLE001  (the toolkit's own fault: say so, with its traceback after the reason)
        return Outcome(exit_codes.FAILED, OutcomeKind.TOOLKIT_FAILED,
                       f"Training failed: the toolkit failed before the training script ended: {type(e).__name__}: "
                       f"{e}", details=traceback.format_exc())


def train(paths: JobPaths, base_env: Mapping[str, str]) -> int:
    """The whole job; returns its exit code. `base_env` is the container's environment, which the workers'
    environment is built from (os.environ is never changed for them).

    After the workers each step is guarded, so none can cost the job its verdict: the wrap-up (bounded, under the
    stop handling), the summary, the verdict; only then is the run's scratch folder removed, however long that
    takes. A host of a multi-host job then waits (bounded) until every host has written its verdict."""
    clear_verdict(paths)
    scratch = tempfile.mkdtemp(prefix="opentc-")   # the run's own files
    recorder = JobRecorder()
    supervisor = None
    try:
        launch = LaunchSettings.from_env(base_env)
    except JobNotStarted as e:
        outcome = not_started(str(e), e.exit_code)
    else:
        supervisor = Supervisor(grace=launch.grace)
        supervisor.install_signal_handlers()
        outcome = run_job(paths, launch, base_env, supervisor, scratch, recorder)
        outcome = wrap_up(outcome, recorder, supervisor, base_env, launch.finish_timeout)
    write_summary(paths, recorder, outcome)
    if supervisor is not None:
        settled = settle(outcome, supervisor, "while the job summary was being written")
        if settled != outcome:   # a stop during the summary: the summary says so too
            outcome = settled
            write_summary(paths, recorder, outcome)
    report(paths, outcome)
    shutil.rmtree(scratch, ignore_errors=True)
    job = recorder.job
    if job is not None and supervisor is not None and supervisor.stop_requested is None \
            and not outcome.hosts_never_met:
        # Nothing of this host's is left to do: the hosts end together (SageMaker's local mode stops all at the first).
        # A host that never met the others has no verdict of theirs to wait for.
        wait_for_every_host(job.hosts, job.current_host, end_port(launch.master_port), launch.hosts_end_timeout,
                            stopped=lambda: supervisor.stop_requested is not None)
    return outcome.exit_code


def configure_logging() -> None:
    # Non-text in a message (a file name that is not UTF-8, through os.listdir) is written escaped, never
    # raised: the log is where a failure is told.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    from sagemaker_training import logging_config

    logging_config.configure_logger(logging.INFO)


def _exit(code: int) -> NoReturn:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(
        prog="opentc-train", description="Run a SageMaker training job folder as the image's `train` does.")
    parser.add_argument("job_dir", nargs="?", help="a folder laid out like /opt/ml (input/config/*.json, "
                                                   "code/, ...); default: $SAGEMAKER_BASE_DIR, else /opt/ml")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the launch plan (settings and their sources, the command, the environment, what "
                             "would be installed) and exit: nothing is run, installed or written; bad input exits as "
                             "the job would, with its message on stderr")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.job_dir:
        base = os.path.abspath(args.job_dir)
        if not os.path.isdir(base):
            parser.error(f"{args.job_dir} is not a folder")
        # sagemaker-training reads its paths from this variable when it is imported, later in this process.
        os.environ["SAGEMAKER_BASE_DIR"] = base
    else:
        base = os.environ.get("SAGEMAKER_BASE_DIR") or DEFAULT_BASE_DIR
    configure_logging()
    if args.dry_run:
        _exit(dry_run(JobPaths(base), dict(os.environ)))
    _exit(train(JobPaths(base), dict(os.environ)))


if __name__ == "__main__":
    main()

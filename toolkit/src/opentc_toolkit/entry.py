"""The toolkit's entry: SAGEMAKER_TRAINING_MODULE=opentc_toolkit.entry:main.

sagemaker-training's `train` command calls `main()`. On success it returns and `train` writes
output/success and logs `Reporting training SUCCESS`; on failure it writes output/failure itself and
raises TrainingFailed, whose errno becomes `train`'s exit code.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Mapping

from .compiler import CompilerSettings, compiler_environment
from .errors import JobConfigError, TrainingFailed
from .job import TrainingJob, read_job
from .outcome import (
    Outcome,
    clear_stale_outcome,
    compose,
    failure_from_result,
    launcher_record,
    single_worker_record,
    write_failure,
)
from .peers import wait_for_hosts
from .plan import LaunchPlan, LaunchSettings, build_plan
from .source import entry_point_path, fetch_code, install_requirements
from .supervisor import Supervisor

log = logging.getLogger("opentc_toolkit")


def announce(settings: CompilerSettings, job: TrainingJob, env: Mapping[str, str]) -> None:
    if settings.enabled:
        log.info("Found configuration for Training Compiler")
        log.info("Configuring SM Training Compiler...")
        log.info("PyTorch/XLA on PJRT_DEVICE=%s (%d GPU(s) on this host)", env.get("PJRT_DEVICE"), job.num_gpus)
        if settings.debug:
            log.info("Training Compiler set to debug mode. This may impact performance. "
                     "Debug artifacts will be saved in %s", job.paths.compiler_output)
    else:
        log.info("Training Compiler is off (%s): plain PyTorch, USE_TORCH_XLA=%s",
                 "sagemaker_training_compiler_enabled=false" if "sagemaker_training_compiler_enabled"
                 in job.framework_params else "sagemaker_training_compiler_enabled not set",
                 env.get("USE_TORCH_XLA"))
        if settings.debug:
            log.warning("sagemaker_training_compiler_debug_mode is ignored: the compiler is off")
    if job.is_multi_host and not settings.multi_worker:
        log.warning("%d hosts but sagemaker_pytorch_xla_multi_worker_enabled is off: every host trains on "
                    "its own, without synchronising with the others", len(job.hosts))


def describe(plan: LaunchPlan) -> None:
    if plan.uses_launcher:
        log.info("launching %d worker(s) on this host (node %d of %d, rendezvous on %s): %s",
                 plan.workers_per_host, plan.node_rank, plan.nodes, plan.master_addr, list(plan.argv))
    else:
        log.info("launching one worker: %s", list(plan.argv))


def run_job(base_env: Mapping[str, str], supervisor: Supervisor) -> tuple[Outcome, str]:
    """Run the job; returns how it ended and the output folder the verdict belongs in."""
    from sagemaker_training import environment

    output_dir = environment.output_dir
    try:
        job = read_job()
        output_dir = job.paths.output
        # SageMaker creates these; a local job folder may lack them, and the trainer's success file
        # and the script's SM_MODEL_DIR / SM_OUTPUT_DATA_DIR need them.
        for folder in (job.paths.output_data, job.paths.model):
            os.makedirs(folder, exist_ok=True)
        clear_stale_outcome(output_dir)
        settings = CompilerSettings.from_hyperparameters(job.framework_params)
        launch = LaunchSettings.from_env(base_env)
        supervisor.grace = launch.grace
        changes = compiler_environment(settings, gpu_count=job.num_gpus,
                                       compiler_output=job.paths.compiler_output, base_env=base_env)
        env = {**base_env, **job.script_env, **changes.applied}
        announce(settings, job, env)
        for name, value in changes.kept.items():
            log.info("Found pre-existing configuration %s=%s: keeping it", name, value)

        code = fetch_code(job)
        install_requirements(code)
        script = entry_point_path(job, code)
        if settings.enabled:
            os.makedirs(job.paths.compiler_output, exist_ok=True)

        with tempfile.TemporaryDirectory(prefix="opentc-") as scratch:
            plan = build_plan(job, settings, launch, env, script, scratch)
            if plan.peers:
                wait_for_hosts(plan.peers, launch.peer_timeout,
                               stopped=lambda: supervisor.stop_requested is not None)
            describe(plan)
            result = supervisor.run(plan.argv, plan.env, plan.cwd, workers_are_children=plan.uses_launcher)
            if result.exit_code == 0 and result.stopped_by is None:
                return Outcome(0), output_dir
            record = (launcher_record(plan.failure_report) if plan.uses_launcher
                      else single_worker_record(result, plan.error_file))
            return failure_from_result(result, record, job.current_host, plan.world_size), output_dir
    except JobConfigError as e:
        return Outcome(e.exit_code, compose(f"Training not started: {e}")), output_dir


def main() -> None:
    supervisor = Supervisor(grace=LaunchSettings().grace)
    supervisor.install_signal_handlers()
    # A snapshot: the workers' environment is built from it; os.environ is never changed for them.
    base_env = dict(os.environ)
    outcome, output_dir = run_job(base_env, supervisor)
    if outcome.succeeded:
        return
    failure_file = write_failure(output_dir, outcome)
    raise TrainingFailed(outcome.exit_code, failure_file)

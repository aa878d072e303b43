"""From the job's files to its launch plan: every decision a job makes before anything of the user's is installed or
started, the same for `train` (entry.run_job, which then runs the plan) and `train --dry-run` (dry_run.py, which
prints it)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .aws_launcher import adapt_aws_launcher
from .compiler import JobSettings
from .job import JobPaths, TrainingJob, read_job
from .model_trainer import adapt_model_trainer
from .output_folders import check_output_folders
from .plan import LaunchPlan, LaunchSettings, build_plan
from .source import code_folder, entry_point_path, fetch_code

log = logging.getLogger("opentc_toolkit")


@dataclass(frozen=True)
class PlannedJob:
    job: TrainingJob            # as the adapters left it (an SDK v3 layout, an AWS-era launcher)
    settings: JobSettings
    code: str                   # the folder the code is in (a dry run's: a copy under its scratch folder)
    plan: LaunchPlan            # runs the code from the folder a real run puts it in


def plan_job(paths: JobPaths, launch: LaunchSettings, base_env: Mapping[str, str], scratch: str,
             noted: Callable[[TrainingJob, JobSettings | None], None] = lambda job, settings: None,
             dry_run: bool = False) -> PlannedJob:
    """Read the job, choose its settings, fetch its code, plan the launch and check the output folders; `noted`
    learns the job and its settings as soon as each is known (the job summary names them even when a later step
    refuses the job). A `dry_run` writes nothing of the job's: the code is fetched under `scratch`, and the output
    folders are checked, not made. Raises JobNotStarted (BadInput) for anything the job cannot run with."""
    job = read_job(paths)
    noted(job, None)
    settings = JobSettings.from_hyperparameters(job.framework_params, job.hyperparameters)
    noted(job, settings)
    settings.check_installed(base_env)
    adapted = adapt_model_trainer(job, settings)
    if adapted is not None:   # the job as the SageMaker SDK v3's ModelTrainer laid it out
        log.info("%s", adapted.summary)
        job, settings = adapted.job, adapted.settings
        noted(job, settings)
    code = fetch_code(job, scratch, into_scratch=dry_run)
    adapted = adapt_aws_launcher(job, settings, code)
    if adapted is not None:   # the job as AWS's torch_xla.distributed.sm_dist would have run it
        log.info("%s", adapted.summary)
        job, settings = adapted.job, adapted.settings
        noted(job, settings)
        settings.check_installed(base_env)   # it runs on XLA: an image without torch-xla says so now
    # Everything that can refuse the job is decided here, before anything is installed or started.
    script = entry_point_path(job, code)
    runs_from = code_folder(job, scratch) if dry_run else code
    plan = build_plan(job, settings, launch, base_env, os.path.join(runs_from, os.path.relpath(script, code)),
                      runs_from, scratch)
    check_output_folders(paths, settings.enabled, create=not dry_run)
    return PlannedJob(job, settings, code, plan)

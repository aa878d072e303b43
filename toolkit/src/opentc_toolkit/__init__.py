"""opentc_toolkit: the SageMaker side of the open Training Compiler container.

Data flow, one module each:
  job files -> job.read_job -> job.TrainingJob (frozen) -> job_settings.JobSettings (the backend chosen)
  -> plan.plan_job, plan.build_plan -> plan.LaunchPlan (argv + environment, the launch decided) -> supervisor.Supervisor
  -> outcome.judge -> outcome.Outcome -> wrap_up.wrap_up (the compile reports, the cache published, bounded)
  -> job_summary.write_summary (output/data/job-summary.json) -> outcome.report (output/success or
  output/failure, exit code) -> hosts_end (a multi-host job's hosts end together)
`entry.main` is the image's `train` (and `opentc-train`); entry.run_job and entry.train read as that pipeline.
`opentc-train --dry-run` (dry_run.py) runs it up to the launch plan and prints the plan instead.
"""

__version__ = "0.1.0"

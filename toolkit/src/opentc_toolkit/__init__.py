"""opentc_toolkit: the SageMaker side of the open Training Compiler container.

Data flow, one module each:
  job files -> job.read_job -> job.TrainingJob (frozen) -> compiler.CompilerSettings (the backend chosen)
  -> plan.build_plan -> plan.LaunchPlan (argv + environment, the launch decided) -> supervisor.Supervisor
  -> outcome.judge -> outcome.Outcome -> job_summary.write_summary (output/data/job-summary.json)
  -> outcome.report (output/success or output/failure, exit code)
`entry.main` is the image's `train` (and `opentc-train`); entry.run_job reads as that pipeline.
"""

__version__ = "0.1.0"

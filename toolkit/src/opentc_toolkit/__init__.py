"""opentc_toolkit: the SageMaker side of the open Training Compiler container.

Data flow, one module each:
  job files -> job.TrainingJob (frozen) -> compiler.CompilerSettings -> compiler.compiler_environment
  -> plan.LaunchPlan (argv + environment) -> supervisor.Supervisor -> outcome (exit code, failure file)
`entry.main` is what SAGEMAKER_TRAINING_MODULE names.
"""

__version__ = "0.1.0"

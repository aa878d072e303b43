"""Errors the toolkit reports to the user; each message says what was wrong and what is accepted."""

EXIT_CONFIG_ERROR = 2


class JobConfigError(Exception):
    """The job as configured cannot run; nothing was started."""

    exit_code = EXIT_CONFIG_ERROR


class TrainingFailed(Exception):
    """Raised to sagemaker-training's trainer, which exits with `errno`.

    The failure file is already written by then; the trainer keeps it (the first writer wins).
    """

    def __init__(self, exit_code: int, failure_file: str):
        super().__init__(f"training failed with exit code {exit_code}; the reason is in {failure_file}")
        self.errno = exit_code

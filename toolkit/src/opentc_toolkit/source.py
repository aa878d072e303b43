"""The user's code: fetched into the code folder, its requirements installed, its entry point found."""

from __future__ import annotations

import logging
import os
from urllib.parse import urlparse

from .errors import JobConfigError
from .job import TrainingJob

log = logging.getLogger(__name__)


class RequirementsFailed(JobConfigError):
    exit_code = 1


def _local_path(uri: str) -> str:
    return urlparse(uri).path if uri.startswith("file://") else uri


def fetch_code(job: TrainingJob) -> str:
    """Put sagemaker_submit_directory (a folder, or a file:// or s3:// tarball) into the code folder."""
    from sagemaker_training import files

    uri = job.submit_directory
    code = job.paths.code
    if not uri.startswith("s3://"):
        uri = _local_path(uri)
        if os.path.abspath(uri) == os.path.abspath(code):
            return code
        if not os.path.exists(uri):
            raise JobConfigError(f"sagemaker_submit_directory {job.submit_directory!r} does not exist: use an "
                                 f"s3:// or file:// URI of a .tar.gz, or a folder inside the container.")
    try:
        files.download_and_extract(uri, code)  # skipped when the code folder already has files
    except Exception as e:  # boto3's errors, a broken tarball: the user's input was wrong
        raise JobConfigError(f"sagemaker_submit_directory {job.submit_directory!r} could not be fetched "
                             f"into {code}: {type(e).__name__}: {e}") from None
    return code


def install_requirements(code: str) -> None:
    """requirements.txt beside the script is installed before the script runs, as SageMaker does."""
    if not os.path.isfile(os.path.join(code, "requirements.txt")):
        return
    from sagemaker_training import errors, modules

    try:
        modules.install_requirements(code, capture_error=True)
    except errors.InstallRequirementsError as e:
        raise RequirementsFailed(f"requirements.txt in {code} could not be installed: {e}") from None


def entry_point_path(job: TrainingJob, code: str) -> str:
    program = job.entry_point
    if not program:
        raise JobConfigError("no training script: set the hyperparameter sagemaker_program to the script's "
                             "file name, e.g. \"train.py\" (JSON-encoded in hyperparameters.json: \"\\\"train.py\\\"\").")
    path = os.path.join(code, program)
    if not program.endswith(".py"):
        raise JobConfigError(f"sagemaker_program {program!r} is not accepted: the Training Compiler runs "
                             f"Python scripts; use a .py file.")
    if not os.path.isfile(path):
        present = sorted(os.listdir(code))[:20] if os.path.isdir(code) else []
        raise JobConfigError(f"training script {program!r} not found in {code} "
                             f"(it holds: {', '.join(present) or 'nothing'}). Check sagemaker_program and "
                             f"sagemaker_submit_directory.")
    return path

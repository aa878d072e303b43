"""The user's code: fetched into the code folder, its requirements installed, its entry point found."""

from __future__ import annotations

import logging
import os
import sys
import tarfile
import zlib
from collections.abc import Mapping
from urllib.parse import urlparse

from opentc_launcher import exit_codes

from .errors import JobConfigError, JobStopped
from .job import TrainingJob
from .outcome import last_lines
from .stack import conflicts, constraints_text, stack_pins
from .supervisor import Command, Supervisor

log = logging.getLogger(__name__)


class RequirementsFailed(JobConfigError):
    exit_code = exit_codes.FAILED


def _local_path(uri: str) -> str:
    return urlparse(uri).path if uri.startswith("file://") else uri


def _is_tarball(path: str) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except (tarfile.TarError, EOFError, zlib.error, OSError):   # a gzip stream that ends early, and the like
        return False


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
        if os.path.isfile(uri) and not _is_tarball(uri):
            raise JobConfigError(f"sagemaker_submit_directory {job.submit_directory!r} is not a tar archive "
                                 f"(corrupt, or another format): it must be a .tar.gz of the source folder, "
                                 f"as the SageMaker SDK uploads it, or a folder.")
    try:
        files.download_and_extract(uri, code)  # skipped when the code folder already has files
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise JobConfigError(f"sagemaker_submit_directory {job.submit_directory!r} is a corrupt tarball: "
                             f"{type(e).__name__}: {e}. Upload the source folder again as a .tar.gz.") from None
    except Exception as e:  # boto3's errors: the user's input was wrong, or S3 unreachable
        raise JobConfigError(f"sagemaker_submit_directory {job.submit_directory!r} could not be fetched "
                             f"into {code}: {type(e).__name__}: {e}") from None
    return code


def _pip_reason(stderr: str) -> str:
    """pip's own account of a failure: its ERROR lines (and what follows them), else its last lines."""
    lines = stderr.strip().splitlines()
    first_error = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), None)
    return "\n".join(lines[first_error:]) if first_error is not None else last_lines(stderr)


def install_requirements(code: str, supervisor: Supervisor, env: Mapping[str, str], scratch: str,
                         name: str = "requirements.txt") -> None:
    """requirements.txt beside the script is installed before the script runs, as SageMaker does, with pip
    under the supervisor (a stop reaches it) and under the pins of the packages that must move together."""
    requirements = os.path.join(code, name)
    if not os.path.isfile(requirements):
        return
    pins = stack_pins()
    with open(requirements, "rb") as f:
        lines = f.read().decode("utf-8", errors="replace").splitlines()
    clashes = conflicts(lines, pins)
    if clashes:
        raise JobConfigError(
            f"{name} asks for {', '.join(clashes)}. torch, torch-xla, the XLA:CUDA plugin and the "
            f"CUDA libraries are installed as one tested set and cannot be changed by {name}: remove "
            f"the requirement or pin the pinned version (the set is in /opt/opentc/constraints.txt).")
    constraints = os.path.join(scratch, "stack-constraints.txt")
    with open(constraints, "w", encoding="utf-8") as f:
        f.write(constraints_text(pins))
    log.info("installing %s (torch, torch-xla and the CUDA libraries held at the installed versions)",
             requirements)
    result = supervisor.run(Command(
        argv=(sys.executable, "-m", "pip", "install", "--no-input", "-r", requirements, "-c", constraints),
        env=env, cwd=code))
    if result.stopped_by is not None:
        raise JobStopped(result, "pip", "while requirements.txt was being installed")
    if result.exit_code != exit_codes.OK:
        raise RequirementsFailed(f"{name} in {code} could not be installed (pip ended with "
                                 f"exit code {result.exit_code}):\n{_pip_reason(result.stderr_tail)}")


def entry_point_path(job: TrainingJob, code: str) -> str:
    program = job.entry_point
    if not program:
        raise JobConfigError("no training script: set the hyperparameter sagemaker_program to the script's "
                             "file name, e.g. \"train.py\" (JSON-encoded in hyperparameters.json: "
                             "\"\\\"train.py\\\"\").")
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

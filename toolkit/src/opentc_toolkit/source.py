"""The user's code: fetched into the code folder, its entry point found (its requirements: requirements_install.py)."""

from __future__ import annotations

import logging
import os
import tarfile
import threading
import zlib
from collections.abc import Callable
from urllib.parse import unquote, urlparse

from opentc_launcher.api import why_not_a_script
from opentc_launcher.common import printable

from .job import TrainingJob
from .not_started import BadInput, CodeNotFetched, JobNotStarted

log = logging.getLogger(__name__)


def _local_path(uri: str) -> str:
    """A file:// URI's path, percent-decoded (file:///a%20b/src.tar.gz is /a b/src.tar.gz); anything else as it is."""
    return unquote(urlparse(uri).path) if uri.startswith("file://") else uri


def _listing(folder: str, limit: int = 8) -> str:
    """What a folder holds, for a message: the first names, sorted, made printable."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return "nothing"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(printable(n) for n in names[:limit]) + more if names else "nothing"


def _is_tarball(path: str) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except (tarfile.TarError, EOFError, zlib.error, OSError):   # a gzip stream that ends early, and the like
        return False


def _runs_as_it_is(job: TrainingJob) -> bool:
    """Whether the code folder runs as it is (sagemaker_submit_directory names it), nothing fetched."""
    uri = job.submit_directory
    return not uri.startswith("s3://") and os.path.abspath(_local_path(uri)) == os.path.abspath(job.paths.code)


def code_folder(job: TrainingJob, scratch: str) -> str:
    """The folder the job's code runs from, as fetch_code decides it (reading, never writing): the code folder, or a
    folder under `scratch` when the code folder already holds files and other code was submitted."""
    code = job.paths.code
    if _runs_as_it_is(job) or not (os.path.isdir(code) and os.listdir(code)):
        return code
    return os.path.join(scratch, "code")


class FetchStopped(Exception):
    """A stop arrived while the job's code was being fetched; the fetch was left to end with the process."""

    def __init__(self, during: str):
        super().__init__(during)
        self.during = during


FETCH_POLL = 0.1   # seconds between two looks at the stop while the code is fetched


def _fetch_unless_stopped(source: str, target: str, stopped: Callable[[], bool], during: str) -> None:
    """sagemaker-training's download_and_extract in a thread of its own, so that a stop ends the wait: S3 that stops
    answering holds a socket read for minutes (botocore's timeouts and retries), past the 120 s SageMaker gives a
    stopped job before SIGKILL, and a signal handler cannot interrupt it. Raises what the fetch raised, or
    FetchStopped."""
    from sagemaker_training import files

    failed: list[BaseException] = []

    def fetch() -> None:
        try:
            files.download_and_extract(source, target)
        except BaseException as e:  # noqa: BLE001  (raised again in the caller's thread)
            failed.append(e)

    fetching = threading.Thread(target=fetch, name="code-fetch", daemon=True)
    fetching.start()
    while fetching.is_alive():
        if stopped():
            raise FetchStopped(during)
        fetching.join(FETCH_POLL)
    if failed:
        raise failed[0]


def fetch_code(job: TrainingJob, scratch: str, into_scratch: bool = False,
               stopped: Callable[[], bool] = lambda: False) -> str:
    """The folder the job's code was put in: the one it runs from (code_folder), or with `into_scratch` a folder of
    its own under `scratch`, for a dry run, which writes nothing of the job's. `stopped` says when the job is
    stopping: the fetch is given up then (FetchStopped).

    sagemaker_submit_directory (a folder, or a file:// or s3:// tarball) is put into the code folder. When the
    code folder already holds files (code baked into a derived image, an earlier run's extraction), the code this
    job submitted still wins, since the job asked for it: it is put into a folder of this run's own under
    `scratch` and runs from there, the log says so, and nothing in the code folder is overwritten. Without
    sagemaker_submit_directory (or with it naming the code folder) the code folder runs as it is.
    """
    uri = job.submit_directory
    code = job.paths.code
    source = uri
    if _runs_as_it_is(job):
        return code
    if not uri.startswith("s3://"):
        source = _local_path(uri)
        if not os.path.exists(source):
            raise BadInput(f"sagemaker_submit_directory {job.submit_directory!r} does not exist: use an "
                                 f"s3:// or file:// URI of a .tar.gz, or a folder inside the container.")
        if os.path.isfile(source) and not _is_tarball(source):
            raise BadInput(f"sagemaker_submit_directory {job.submit_directory!r} is not a tar archive "
                                 f"(corrupt, or another format): it must be a .tar.gz of the source folder, "
                                 f"as the SageMaker SDK uploads it, or a folder.")
    target = code_folder(job, scratch)
    if into_scratch:
        target = os.path.join(scratch, "dry-run-code")
    elif target != code:
        log.warning("the code folder %s already holds files (%s), and sagemaker_submit_directory names other code "
                    "(%s): the submitted code runs, from %s, and %s is left as it is. To run the code folder's "
                    "own code instead, leave sagemaker_submit_directory out.", code, _listing(code), uri, target,
                    code)
    try:
        _fetch_unless_stopped(source, target, stopped, f"while the job's code was being fetched from {uri}")
    except (tarfile.TarError, EOFError, zlib.error) as e:
        raise BadInput(f"sagemaker_submit_directory {job.submit_directory!r} is a corrupt tarball: "
                             f"{type(e).__name__}: {e}. Upload the source folder again as a .tar.gz.") from None
    except FetchStopped:
        raise
    except Exception as e:  # noqa: BLE001  (boto3's errors, the disk's: the job's fault or not, as fetch_failure says)
        raise fetch_failure(e, f"sagemaker_submit_directory {job.submit_directory!r} could not be fetched into "
                               f"{target}: {type(e).__name__}: {e}") from None
    log.info("the job's code: sagemaker_submit_directory %s, in %s", uri, target)
    return target


# What S3 answers when the job names an object that is not there, or one its role may not read: the job is wrong.
_NAMED_WRONG_CODES = {"NoSuchKey", "NoSuchBucket", "AccessDenied", "InvalidBucketName", "InvalidObjectState", "404",
                      "403", "400"}


def fetch_failure(error: Exception, said: str) -> JobNotStarted:
    """Why the code could not be fetched, as the refusal the job ends with: bad input (exit 2: change the job) only
    when the job named something that cannot be fetched (no such object or bucket, no access to it, a malformed
    URI); an outage (no connection, a timeout, S3's own 5xx or throttling, no credentials in the container) or a
    disk that is full is no fault of the job's (exit 1: run it again)."""
    from botocore.exceptions import ClientError, ParamValidationError  # sagemaker-training's, through boto3

    if isinstance(error, ClientError):
        answer = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if answer in _NAMED_WRONG_CODES or status in (400, 403, 404):
            return BadInput(f"{said}. Check the URI, and that the job's role may read it.")
    elif isinstance(error, (ParamValidationError, ValueError)):
        return BadInput(f"{said}. Use an s3:// or file:// URI of a .tar.gz, or a folder inside the container.")
    return CodeNotFetched(f"{said}. This is not the job's fault (S3 or the network did not answer, or the "
                          f"container could not store the code): run the job again.")


def entry_point_path(job: TrainingJob, code: str) -> str:
    program = job.entry_point
    if not program:
        raise BadInput("no training script: set the hyperparameter sagemaker_program to the script's "
                             "file name, e.g. \"train.py\" (JSON-encoded in hyperparameters.json: "
                             "\"\\\"train.py\\\"\").")
    path = os.path.join(code, program)
    if not program.endswith(".py"):
        raise BadInput(f"sagemaker_program {program!r} is not accepted: the Training Compiler runs "
                             f"Python scripts; use a .py file.")
    problem = why_not_a_script(path)
    if problem == "does not exist":
        raise BadInput(f"training script {program!r} not found in {code} "
                             f"(it holds: {_listing(code, 20)}). Check sagemaker_program and "
                             f"sagemaker_submit_directory.")
    if problem:
        raise BadInput(f"training script {program!r} in {code} {problem}: sagemaker_program must name a "
                             f"Python file in the code folder (it holds: {_listing(code, 20)}).")
    try:   # as the workers will open it (they run as this process's user): a dry run says so too
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as e:
        raise BadInput(f"training script {program!r} in {code} cannot be opened ({type(e).__name__}: "
                       f"{e.strerror}): it must be a file the job's user (uid {os.getuid()}) can read.") from None
    return path

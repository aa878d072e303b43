"""The user's code: fetched into the code folder, its requirements installed, its entry point found."""

from __future__ import annotations

import logging
import os
import re
import sys
import tarfile
import threading
import zlib
from collections.abc import Callable, Mapping
from urllib.parse import unquote, urlparse

from opentc_launcher.api import exit_codes, why_not_a_script
from opentc_launcher.common import printable

from . import hf_stack
from .job import TrainingJob
from .job_files import MiB, read_regular
from .not_started import BadInput, CodeNotFetched, JobNotStarted, RequirementsFailed
from .outcome import last_lines
from .stack import conflicts, constraints_text, stack_pins
from .supervisor import Command, JobStopped, ProcessResult, Supervisor

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


MAX_REQUIREMENTS_BYTES = MiB   # a requirements file is a few hundred bytes; past this, not one

# pip's WARNING when it cannot reach an index: "Retrying (Retry(...)) after connection broken by '<the cause>': <url>".
# Its ERROR lines then only say "No matching distribution found", which reads like a typo in a package name.
_CONNECTION_BROKEN = re.compile(r"after connection broken by '(?P<cause>.+)': (?P<where>\S+)\s*$")


# pip's words when a package had to be built from source and the build failed.
_BUILD_FAILED = re.compile(r"Failed building wheel for (?P<name>[\w.-]+)"
                           r"|^\W*(?:\u2570\u2500>|->) (?P<listed>[\w.-]+)\s*$")
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _build_failures(lines: list[str]) -> list[str]:
    names = [m["name"] or m["listed"] for m in map(_BUILD_FAILED.search, lines) if m]
    return list(dict.fromkeys(names))


def _pip_reason(stderr: str) -> str:
    """pip's own account of a failure: the network cause first when pip could not reach an index, what had to be
    built from source when a build failed, then its ERROR lines (and what follows them), else its last lines."""
    lines = stderr.strip().splitlines()
    first_error = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), None)
    reason = "\n".join(lines[first_error:]) if first_error is not None else last_lines(stderr)
    built = _build_failures(lines)
    if built:
        era = (" transformers 4.11 to 4.15 and 4.18 to 4.22 need a tokenizers older than 0.13, which has no wheel "
               f"for Python {PYTHON} (it builds only with Rust and the network): pin transformers 4.23 or later "
               "(benchmarks/RESULTS.md lists the lines that train), or leave tokenizers unpinned." if "tokenizers"
               in built else "")
        reason = (f"{', '.join(built)} had to be built from source, since no release the requirements allow has a "
                  f"wheel for this image's Python {PYTHON}, and the build failed.{era} Ask for versions with a "
                  f"wheel for Python {PYTHON} (pypi.org lists each release's files).\n{reason}")
    broken = next((m for m in map(_CONNECTION_BROKEN.search, reversed(lines)) if m), None)
    if broken is not None:
        reason = (f"the package index could not be reached ({broken['where']}): {broken['cause']}. Check the "
                  f"network, the proxy (HTTPS_PROXY) or the index (PIP_INDEX_URL), or bake the packages into the "
                  f"image.\n{reason}")
    return reason


def requirements_path(code: str, name: str = "requirements.txt") -> str | None:
    """requirements.txt in the code folder (whatever is there under that name: check_requirements says what is
    wrong with anything but a readable file), or None where there is nothing."""
    path = os.path.join(code, name)
    return path if os.path.lexists(path) else None


def check_requirements(path: str, name: str, pins: Mapping[str, str]) -> list[str]:
    """The requirements file's lines; BadInput for one that is not a readable regular file of at most
    MAX_REQUIREMENTS_BYTES, or that would move a package of the tested stack (`pins`)."""
    what = "pip requirements, one per line"
    try:
        raw = read_regular(path, f"{name} in the code folder", MAX_REQUIREMENTS_BYTES, what)
    except FileNotFoundError:
        raise BadInput(f"{name} in the code folder is a symbolic link to {printable(os.readlink(path))!r}, which "
                       f"does not exist: it must be a regular file holding {what}.") from None
    lines = raw.decode("utf-8", errors="replace").splitlines()
    clashes = conflicts(lines, pins)
    if clashes:
        raise BadInput(
            f"{name} asks for {', '.join(clashes)}. torch, torch-xla, the XLA:CUDA plugin and the "
            f"CUDA libraries are installed as one tested set and cannot be changed by {name}: remove "
            f"the requirement or pin the pinned version (the set is in /opt/opentc/constraints.txt).")
    return lines


def _pip(supervisor: Supervisor, argv: tuple[str, ...], env: Mapping[str, str], code: str, name: str,
         doing: str) -> ProcessResult:
    """pip under the supervisor (a stop reaches it); a stop or a failure ends the job before the script."""
    result = supervisor.run(Command(argv=argv, env=env, cwd=code))
    if result.stopped_by is not None:
        raise JobStopped(result, "pip", f"while {name} was being installed")
    if result.exit_code != exit_codes.OK:
        raise RequirementsFailed(f"{name} in {code} could not be installed ({doing}: pip ended with exit code "
                                 f"{result.exit_code}):\n{_pip_reason(result.stderr_tail)}")
    return result


def install_requirements(code: str, supervisor: Supervisor, env: Mapping[str, str], scratch: str,
                         name: str = "requirements.txt") -> None:
    """requirements.txt beside the script is installed before the script runs, as SageMaker does, with pip
    under the supervisor (a stop reaches it) and under the pins of the packages that must move together. One that
    moves the Hugging Face stack re-resolves the rest of it (hf_stack.py). What was installed must pass `pip check`."""
    requirements = requirements_path(code, name)
    if requirements is None:
        return
    pins = stack_pins()
    lines = check_requirements(requirements, name, pins)
    constraints = os.path.join(scratch, "stack-constraints.txt")
    with open(constraints, "w", encoding="utf-8") as f:
        f.write(constraints_text(pins))
    install = (sys.executable, "-m", "pip", "install", "--no-input", "-r", requirements)
    family = hf_stack.installed_family()
    moves = hf_stack.moved(lines, family)
    extra: tuple[str, ...] = ()
    if moves:
        extra = tuple(hf_stack.companions(lines, family))
        log.info("%s asks for %s: the image's %s are resolved again with it (not pinned), so that they go together",
                 name, ", ".join(moves), ", ".join(extra) or "Hugging Face packages")
        report = os.path.join(scratch, "pip-resolution.json")
        _pip(supervisor, (*install, *extra, "-c", constraints, "--dry-run", "--quiet", "--report", report), env, code,
             name, "resolving it")
        with open(report, encoding="utf-8") as f:
            transformers = hf_stack.chosen(f.read(), "transformers", family)
        rules = hf_stack.rules_for(transformers)
        if rules:
            bounds = os.path.join(scratch, "transformers-line-constraints.txt")
            with open(bounds, "w", encoding="utf-8") as f:
                f.write("".join(f"{c}\n" for rule in rules for c in rule.constraints))
            extra += ("-c", bounds)
            for rule in rules:
                log.info("transformers %s: %s, since %s", transformers, ", ".join(rule.constraints), rule.why)
    log.info("installing %s (torch, torch-xla and the CUDA libraries held at the installed versions)",
             requirements)
    _pip(supervisor, (*install, *extra, "-c", constraints), env, code, name, "installing it")
    checked: list[str] = []
    result = supervisor.run(Command(argv=(sys.executable, "-m", "pip", "check"), env=env, cwd=code),
                            on_line=checked.append)
    if result.stopped_by is not None:
        raise JobStopped(result, "pip", f"while {name} was being installed")
    broken = hf_stack.check_failures("\n".join(checked))
    if result.exit_code != exit_codes.OK and broken:
        moved_words = (f" It asked for {', '.join(moves)}, which moved the image's Hugging Face packages; pin the "
                       f"packages named above to versions that go with it, or drop the pin to use the image's "
                       f"({', '.join(f'{k} {v}' for k, v in family.items())})." if moves else
                       " Pin the packages named above to versions that go together.")
        raise RequirementsFailed(f"{name} in {code} installed, but the packages it left do not work together (pip "
                                 f"check):\n" + "\n".join(f"  {line}" for line in broken[:20]) + "\n" + moved_words)


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
    return path

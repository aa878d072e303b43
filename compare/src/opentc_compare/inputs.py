"""Where a job's summary is read from: a job folder, an output folder, an output.tar.gz (what SageMaker keeps), or
an s3:// URI of one (boto3, when installed and given credentials)."""

from __future__ import annotations

import math
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

from .summary import FILE_NAME, MAX_BYTES, JobSummary, NotASummary, load, too_large

# s3:// reads give up after this many seconds without a connection or an answer, twice (botocore's defaults: 60 s,
# 5 attempts, 3 minutes and more for an endpoint that drops packets).
S3_TIMEOUT_VARIABLE = "OPENTC_COMPARE_S3_TIMEOUT"
S3_TIMEOUT_SECONDS = 5.0
S3_MAX_TIMEOUT_SECONDS = 3600.0
S3_ATTEMPTS = 2
# What a damaged archive raises past tarfile's own errors (bz2's and gzip's are OSErrors, xz's and zlib's not).
CORRUPT: tuple[type[Exception], ...] = (tarfile.TarError, OSError, EOFError, zlib.error)
try:
    import lzma

    CORRUPT += (lzma.LZMAError,)
except ImportError:   # a Python built without xz: tarfile reads no .tar.xz either
    pass
# An output.tar.gz holds a job's output/data; past this many members before the summary, it is not read further
# (each member read costs memory: tarfile keeps them all).
MAX_MEMBERS = 100_000


class InputError(Exception):
    """A job argument that cannot be read; the message names it and what is accepted."""


@dataclass(frozen=True)
class Job:
    name: str                  # the job's name (its summary's, else the folder or file it came from)
    source: str                # the argument it came from (a job merged from its hosts: theirs, joined)
    summary: JobSummary
    hosts_given: str = ""      # a job merged from its hosts' summaries (hosts.py): "all 2 hosts", "2 of 3 hosts: ..."

    @property
    def label(self) -> str:
        given = f", {self.hosts_given}" if self.hosts_given else ""
        return f"{self.summary.get('backend') or 'unknown backend'} ({self.name}{given})"


ACCEPTED = ("a job folder (with output/data/job-summary.json), an output folder, an output.tar.gz, or an s3:// URI "
            "of an output.tar.gz")


def _name_from_path(path: str) -> str:
    """The job's name from where its files are: .../<job>/output/output.tar.gz, .../<job>/output/data, .../<job>."""
    parts = [p for p in os.path.normpath(path).split(os.sep) if p]
    while parts and parts[-1] in ("output.tar.gz", "output", "data", FILE_NAME):
        parts.pop()
    return parts[-1] if parts else path


def _read_at_most(f: IO[bytes], where: str) -> bytes:
    """A summary's bytes, reading no more than one byte past MAX_BYTES, whatever its size claims."""
    raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise too_large(where)
    return raw


def _from_folder(path: str) -> bytes:
    for candidate in (os.path.join(path, "output", "data", FILE_NAME), os.path.join(path, "data", FILE_NAME),
                      os.path.join(path, FILE_NAME)):
        if os.path.isfile(candidate):
            try:
                with open(candidate, "rb") as f:
                    return _read_at_most(f, path)
            except OSError as e:
                raise InputError(f"{path}: {candidate} cannot be read ({e.strerror or e})") from None
    raise InputError(f"{path} holds no {FILE_NAME} (looked in output/data/, data/ and the folder itself): the "
                     f"toolkit writes it at the end of every job; pass {ACCEPTED}.")


def _from_tarball(path: str, shown: str) -> bytes:
    try:
        with tarfile.open(path) as tar:
            for _ in range(MAX_MEMBERS):   # member by member: the summary is read as soon as it is found
                member = tar.next()
                if member is None:
                    raise InputError(f"{shown} holds no {FILE_NAME}: is it a job's output.tar.gz? Jobs before the "
                                     f"summary existed have none.")
                if os.path.basename(member.name) == FILE_NAME and member.isfile():
                    if member.size > MAX_BYTES:   # refused unread; _read_at_most too, in case the size lies
                        raise too_large(shown)
                    extracted = tar.extractfile(member)
                    assert extracted is not None   # a regular file has contents
                    return _read_at_most(extracted, shown)
    except CORRUPT as e:
        raise InputError(f"{shown} cannot be read as a tar archive ({type(e).__name__}: {e}); "
                         f"pass {ACCEPTED}.") from None
    raise InputError(f"{shown} holds more than {MAX_MEMBERS:,} files before any {FILE_NAME}: it is not a job's "
                     f"output.tar.gz; pass {ACCEPTED}.")


def s3_timeout(environ: Mapping[str, str] = os.environ) -> float:
    """OPENTC_COMPARE_S3_TIMEOUT in seconds, else the default; InputError naming it when it is not accepted."""
    text = environ.get(S3_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return S3_TIMEOUT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= S3_MAX_TIMEOUT_SECONDS):
        raise InputError(f"environment variable {S3_TIMEOUT_VARIABLE}={text[:40]!r} is not accepted: use a number "
                         f"of seconds above 0 and at most {S3_MAX_TIMEOUT_SECONDS:g} (unset: "
                         f"{S3_TIMEOUT_SECONDS:g}).")
    return value


def _from_s3(uri: str) -> bytes:
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket or not key:
        raise InputError(f"{uri} is not an s3://bucket/key URI of an output.tar.gz.")
    timeout = s3_timeout()
    try:
        import boto3
        from botocore import exceptions as aws
        from botocore.config import Config
    except ImportError:
        raise InputError(f"{uri}: reading s3:// needs boto3: pip install 'opentc-compare[s3]' (or download the file "
                         f"with `aws s3 cp` and pass it).") from None
    config = Config(connect_timeout=timeout, read_timeout=timeout,
                    retries={"total_max_attempts": S3_ATTEMPTS, "mode": "standard"})
    try:
        client = boto3.client("s3", config=config)
    except (aws.BotoCoreError, ValueError) as e:   # a malformed AWS_ENDPOINT_URL or region
        raise InputError(f"{uri}: no S3 client could be made ({e}): check AWS_ENDPOINT_URL and AWS_DEFAULT_REGION."
                         ) from None
    endpoint = client.meta.endpoint_url
    waited = f"{timeout:g} s, {S3_ATTEMPTS} attempts; set {S3_TIMEOUT_VARIABLE} to wait longer"
    with tempfile.TemporaryDirectory(prefix="opentc-compare-") as folder:
        local = os.path.join(folder, "output.tar.gz")
        try:   # one GET streamed to a file: every failure is botocore's (download_file's threads add their own)
            body = client.get_object(Bucket=bucket, Key=key)["Body"]
            with open(local, "wb") as f:
                shutil.copyfileobj(body, f, 2**20)
        except aws.NoCredentialsError:
            raise InputError(f"{uri}: no AWS credentials were found (environment, ~/.aws, or an instance role): set "
                             f"them, or download the file and pass it.") from None
        except aws.ConnectTimeoutError:
            raise InputError(f"{uri} could not be downloaded: connecting to {endpoint} timed out ({waited}).") \
                from None
        except aws.ReadTimeoutError:
            raise InputError(f"{uri} could not be downloaded: {endpoint} did not answer in time ({waited}).") \
                from None
        except aws.ConnectionError as e:
            raise InputError(f"{uri} could not be downloaded: could not connect to {endpoint} ({e}).") from None
        except (aws.BotoCoreError, aws.ClientError) as e:
            raise InputError(f"{uri} could not be downloaded: {e}") from None
        except OSError as e:   # the local copy: a full disk
            raise InputError(f"{uri} could not be saved to {local}: {e}") from None
        return _from_tarball(local, uri)


def read_job(argument: str) -> Job:
    """The job an argument names; InputError saying what was wrong."""
    try:
        return _read_job(argument)
    except NotASummary as e:   # from load, and from a read past MAX_BYTES
        raise InputError(str(e)) from None


def _read_job(argument: str) -> Job:
    if argument.startswith("s3://"):
        raw, name = _from_s3(argument), _name_from_path(argument[len("s3://"):])
    elif os.path.isdir(argument):
        raw, name = _from_folder(argument), _name_from_path(os.path.abspath(argument))
    elif os.path.isfile(argument):
        raw, name = _from_tarball(argument, argument), _name_from_path(os.path.abspath(argument))
    elif os.path.exists(argument):
        raise InputError(f"{argument} is neither a folder nor a file: pass {ACCEPTED}.")
    else:
        raise InputError(f"{argument} does not exist: pass {ACCEPTED}.")
    summary = load(raw, argument)
    return Job(name=summary.get("job_name") or name, source=argument, summary=summary)

"""Where a job's summary is read from: a job folder, an output folder, an output.tar.gz (what SageMaker keeps), or
an s3:// URI of one (boto3, when installed and given credentials)."""

from __future__ import annotations

import os
import tarfile
import tempfile
from dataclasses import dataclass
from typing import Any

from .summary import FILE_NAME, load


class InputError(Exception):
    """A job argument that cannot be read; the message names it and what is accepted."""


@dataclass(frozen=True)
class Job:
    name: str                  # the job's name (its summary's, else the folder or file it came from)
    source: str                # the argument it came from
    summary: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.summary.get('backend', '?')} ({self.name})"


ACCEPTED = ("a job folder (with output/data/job-summary.json), an output folder, an output.tar.gz, or an s3:// URI "
            "of an output.tar.gz")


def _name_from_path(path: str) -> str:
    """The job's name from where its files are: .../<job>/output/output.tar.gz, .../<job>/output/data, .../<job>."""
    parts = [p for p in os.path.normpath(path).split(os.sep) if p]
    while parts and parts[-1] in ("output.tar.gz", "output", "data", FILE_NAME):
        parts.pop()
    return parts[-1] if parts else path


def _from_folder(path: str) -> str:
    for candidate in (os.path.join(path, "output", "data", FILE_NAME), os.path.join(path, "data", FILE_NAME),
                      os.path.join(path, FILE_NAME)):
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                return f.read()
    raise InputError(f"{path} holds no {FILE_NAME} (looked in output/data/, data/ and the folder itself): the "
                     f"toolkit writes it at the end of every job; pass {ACCEPTED}.")


def _from_tarball(path: str, shown: str) -> str:
    try:
        with tarfile.open(path) as tar:
            member = next((m for m in tar.getmembers() if os.path.basename(m.name) == FILE_NAME and m.isfile()), None)
            if member is None:
                raise InputError(f"{shown} holds no {FILE_NAME}: is it a job's output.tar.gz? Jobs before the summary "
                                 f"existed have none.")
            extracted = tar.extractfile(member)
            assert extracted is not None
            return extracted.read().decode("utf-8")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise InputError(f"{shown} cannot be read as a tar archive ({type(e).__name__}: {e}); "
                         f"pass {ACCEPTED}.") from None


def _from_s3(uri: str) -> str:
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    except ImportError:
        raise InputError(f"{uri}: reading s3:// needs boto3: pip install 'opentc-compare[s3]' (or download the file "
                         f"with `aws s3 cp` and pass it).") from None
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not bucket or not key:
        raise InputError(f"{uri} is not an s3://bucket/key URI of an output.tar.gz.")
    with tempfile.TemporaryDirectory(prefix="opentc-compare-") as folder:
        local = os.path.join(folder, "output.tar.gz")
        try:
            boto3.client("s3").download_file(bucket, key, local)
        except NoCredentialsError:
            raise InputError(f"{uri}: no AWS credentials were found (environment, ~/.aws, or an instance role): set "
                             f"them, or download the file and pass it.") from None
        except (BotoCoreError, ClientError) as e:
            raise InputError(f"{uri} could not be downloaded: {e}") from None
        return _from_tarball(local, uri)


def read_job(argument: str) -> Job:
    """The job an argument names; InputError saying what was wrong."""
    if argument.startswith("s3://"):
        text, name = _from_s3(argument), _name_from_path(argument[len("s3://"):])
    elif os.path.isdir(argument):
        text, name = _from_folder(argument), _name_from_path(os.path.abspath(argument))
    elif os.path.isfile(argument):
        text, name = _from_tarball(argument, argument), _name_from_path(os.path.abspath(argument))
    else:
        raise InputError(f"{argument} does not exist: pass {ACCEPTED}.")
    try:
        summary = load(text, argument)
    except ValueError as e:
        raise InputError(str(e)) from None
    return Job(name=summary.get("job_name") or name, source=argument, summary=summary)

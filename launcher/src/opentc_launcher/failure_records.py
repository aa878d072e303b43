"""How a worker's failure is recorded and read back.

A worker writes its record to $TORCHELASTIC_ERROR_FILE in torch.distributed.elastic's format, so torchrun
and `opentc-run` both find it; `FailureRecord` is the launcher's summary of the failure that ended a job.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import asdict, dataclass

from .files import strict_json, write_json
from .text import safe_str

# How a DataLoader worker's (or any re-raised) exception quotes the original traceback in its message.
_ORIGINAL_TRACEBACK = "Original Traceback (most recent call last):"

# Libraries that scripts written for AWS's containers use and this image does not have: a script that reaches for one
# fails with a first line naming the library and what to use instead, not a bare ModuleNotFoundError.
SMDISTRIBUTED = (
    "SageMaker's distributed training libraries (smdistributed: data parallelism, SMDDP, and model parallelism, SMP), "
    "which this image does not have: it runs data-parallel jobs as PyTorch DDP. Use torch.distributed with "
    'backend="nccl" ("gloo" on CPUs) instead of smdistributed.dataparallel and backend="smddp", or let the Trainer '
    "or Accelerate choose the backend; shard a model that outgrows one GPU with torch.distributed.fsdp.fully_shard "
    "instead of SMP")


# torch.distributed's words when a backend is asked for what this host or this torch lacks, and what to say first.
_BACKEND_HINTS = (
    ("ProcessGroupNCCL is only supported with GPUs",
     'the script asks torch.distributed for backend="nccl", which needs GPUs, and this host has none (NCCL runs '
     'collectives between CUDA devices only). Use backend="gloo" on CPU instances (or "cpu:gloo,cuda:nccl", which '
     'picks by the tensors\' device), or run the job on GPU instances.'),
    ("No backend type associated with device type cpu",
     "the script's process group has no backend for CPU tensors: nccl reduces CUDA tensors only. Move the tensors to "
     'the GPU, or create the group with backend="cpu:gloo,cuda:nccl" (or "gloo" on CPU instances).'),
    ("doesn't have NCCL built in",
     'the script asks torch.distributed for backend="nccl", and this torch was built without NCCL (a CPU build). '
     'Use backend="gloo", or an image whose torch has CUDA on GPU instances.'),
    ("doesn't have Gloo built in",
     'the script asks torch.distributed for backend="gloo", and this torch was built without gloo. Use a torch '
     'built with it (the image\'s is), or backend="nccl" on GPU instances.'),
)


def _backend_hint(exc: BaseException) -> str | None:
    """What the host or this torch lacks for the backend the script asked torch.distributed for; None otherwise."""
    text = safe_str(exc)
    return next((hint for words, hint in _BACKEND_HINTS if words in text), None)


def _library_hint(exc: BaseException) -> str | None:
    """What the script reached for that this image does not have, and what to do instead; None for other errors."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "smdistributed":
        return f"the script imports {exc.name}, {SMDISTRIBUTED}."
    if "backend type smddp" in safe_str(exc).lower():   # torch.distributed's "Unknown backend type smddp"
        return f'the script asks torch.distributed for backend="smddp", from {SMDISTRIBUTED}.'
    return None


def record_error(summary: str, traceback_text: str, exit_code: int) -> None:
    """Write this process's error record where its launcher looks for it ($TORCHELASTIC_ERROR_FILE), if anywhere."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {
        "message": {
            "message": summary,
            "extraInfo": {
                "py_callstack": traceback_text,
                "timestamp": str(int(time.time())),
                "exitcode": exit_code,
            },
        }
    }
    write_json(path, data)


@dataclass(frozen=True)
class ErrorRecord:
    """What a process wrote in its error file (record_error's format, torch.distributed.elastic's)."""

    summary: str
    traceback: str = ""
    exit_code: int | None = None


def read_error_record(path: str | None) -> ErrorRecord | None:
    """The error record at `path`, or None when there is none or it cannot be read as one."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            message = json.load(f).get("message", "")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(message, dict):
        return ErrorRecord(str(message))
    extra = message.get("extraInfo")
    extra = extra if isinstance(extra, dict) else {}
    code = str(extra.get("exitcode", ""))
    return ErrorRecord(str(message.get("message", "")), str(extra.get("py_callstack", "")),
                       int(code) if code.lstrip("-").isdigit() else None)


def read_error_file(path: str | None) -> tuple[str, str]:
    """(summary, traceback) from a worker's error file, or empty strings when there is none."""
    record = read_error_record(path)
    return (record.summary, record.traceback) if record else ("", "")


def _last_line(text: str) -> str:
    """The last line that says something: not blank, and not only quotes (multiprocess's RemoteTraceback quotes the
    pool worker's traceback between triple quotes)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip().strip("'\"")]
    return lines[-1] if lines else ""


def summarize_exception(exc: BaseException) -> str:
    """The line a user needs first: the exception, and the error that started it when it was re-raised.

    A DataLoader worker's exception comes back as "Caught ValueError in DataLoader worker process 0." with
    the original traceback inside its message; a chained exception (`raise X from e`) hides its cause
    further down. Either way the original error's own line goes first. An error that comes from a library this image
    does not have (SMDISTRIBUTED above), or from a distributed backend this host or torch lacks (_BACKEND_HINTS), is
    preceded by what to use instead.
    """
    hint = missing_library(exc)
    line = _summary_line(exc, _root_cause(exc))
    return f"{hint}\n({line})" if hint else line


def missing_library(exc: BaseException) -> str | None:
    """What the script reached for that this image (or this host, for a distributed backend) does not have, from the
    error or its cause."""
    root = _root_cause(exc)
    return _library_hint(root) or _library_hint(exc) or _backend_hint(root) or _backend_hint(exc)


def _root_cause(exc: BaseException) -> BaseException:
    """The error that started a chain (`raise X from e`, or raised while handling e)."""
    root, seen = exc, {id(exc)}
    while True:
        earlier = root.__cause__ if root.__cause__ is not None else (
            None if root.__suppress_context__ else root.__context__)
        if earlier is None or id(earlier) in seen:
            return root
        root = earlier
        seen.add(id(root))


def _summary_line(exc: BaseException, root: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    message = safe_str(exc)
    if _ORIGINAL_TRACEBACK in message:
        original = _last_line(message.split(_ORIGINAL_TRACEBACK, 1)[1])
        where = message.split(_ORIGINAL_TRACEBACK, 1)[0].strip()
        return f"{original}\n({type(exc).__name__}: {where})" if original else text
    if root is not exc:
        original = "".join(traceback.format_exception_only(type(root), root)).strip()
        return f"{_last_line(original)}\n(which led to {_last_line(text)})"
    return text


# FailureRecord.stage: where a launch failed.
WORKERS = "workers"   # a worker (the training script) failed
LAUNCH = "launch"     # the launcher itself, before any training script ran: its options, the rendezvous, the OS


@dataclass(frozen=True)
class FailureRecord:
    """The failure that ended a launch: which worker, its exit code, and what it said."""

    exit_code: int
    rank: int | None = None
    summary: str = ""
    traceback: str = ""
    stderr_tail: str = ""
    stage: str = WORKERS

    def to_json(self) -> str:
        return strict_json(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> FailureRecord:
        return cls(**json.loads(text))

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

TAIL_CHARS = 3000
# How a DataLoader worker's (or any re-raised) exception quotes the original traceback in its message.
_ORIGINAL_TRACEBACK = "Original Traceback (most recent call last):"


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


def read_error_file(path: str | None) -> tuple[str, str]:
    """(summary, traceback) from a worker's error file, or empty strings when there is none."""
    if not path:
        return "", ""
    try:
        with open(path, encoding="utf-8") as f:
            message = json.load(f).get("message", "")
    except (OSError, ValueError, AttributeError):
        return "", ""
    if isinstance(message, dict):
        extra = message.get("extraInfo") or {}
        return str(message.get("message", "")), str(extra.get("py_callstack", ""))
    return str(message), ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def safe_str(exc: BaseException) -> str:
    """str(exc), or its type name and a safe repr when its own __str__ raises (the message is the user's code)."""
    try:
        return str(exc)
    except Exception as e:  # noqa: BLE001  (anything the user's __str__ raises)
        return f"<{type(exc).__name__}.__str__ raised {type(e).__name__}; repr: {object.__repr__(exc)}>"


def printable(text: str) -> str:
    """`text` with what cannot be written as UTF-8 (lone surrogates, from a file name that is not UTF-8) escaped
    as \\udcff, so a message about it can always be logged and written."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: object, limit: int = 60) -> str:
    """repr(value) for a message, shortened when long ("'7777...' (5000 characters)"): the input it names must not
    push what is accepted out of the 1,024 characters SageMaker shows."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as written"
    return f"{text[:limit - 20]}... ({size})"


def summarize_exception(exc: BaseException) -> str:
    """The line a user needs first: the exception, and the error that started it when it was re-raised.

    A DataLoader worker's exception comes back as "Caught ValueError in DataLoader worker process 0." with
    the original traceback inside its message; a chained exception (`raise X from e`) hides its cause
    further down. Either way the original error's own line goes first.
    """
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    message = safe_str(exc)
    if _ORIGINAL_TRACEBACK in message:
        original = _last_line(message.split(_ORIGINAL_TRACEBACK, 1)[1])
        where = message.split(_ORIGINAL_TRACEBACK, 1)[0].strip()
        return f"{original}\n({type(exc).__name__}: {where})" if original else text
    root, seen = exc, {id(exc)}
    while True:
        earlier = root.__cause__ if root.__cause__ is not None else (
            None if root.__suppress_context__ else root.__context__)
        if earlier is None or id(earlier) in seen:
            break
        root = earlier
        seen.add(id(root))
    if root is not exc:
        original = "".join(traceback.format_exception_only(type(root), root)).strip()
        return f"{_last_line(original)}\n(which led to {_last_line(text)})"
    return text


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


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

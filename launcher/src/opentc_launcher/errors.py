"""How a worker's failure is recorded and read back.

A worker writes its record to $TORCHELASTIC_ERROR_FILE in torch.distributed.elastic's format, so torchrun
and `opentc-run` both find it; `FailureRecord` is the launcher's summary of the failure that ended a job.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import asdict, dataclass
from typing import Optional

TAIL_CHARS = 3000


def normalise_exit_code(returncode: int) -> int:
    """A shell-style exit code: a death by signal N becomes 128 + N (SIGKILL -> 137)."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(exit_code: int) -> Optional[str]:
    if exit_code > 128:
        try:
            return signal.Signals(exit_code - 128).name
        except ValueError:
            return None
    return None


def write_error_file(path: str, *, summary: str, traceback_text: str, exit_code: int) -> None:
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
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def read_error_file(path: Optional[str]) -> tuple[str, str]:
    """(summary, traceback) from a worker's error file, or empty strings when there is none."""
    if not path:
        return "", ""
    try:
        with open(path, encoding="utf-8") as f:
            message = json.load(f).get("message", "")
    except (OSError, ValueError):
        return "", ""
    if isinstance(message, dict):
        extra = message.get("extraInfo") or {}
        return str(message.get("message", "")), str(extra.get("py_callstack", ""))
    return str(message), ""


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


@dataclass(frozen=True)
class FailureRecord:
    """The failure that ended a launch: which worker, its exit code, and what it said."""

    exit_code: int
    rank: Optional[int] = None
    summary: str = ""
    traceback: str = ""
    stderr_tail: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "FailureRecord":
        return cls(**json.loads(text))

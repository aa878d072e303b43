"""Files the project writes: whole or not at all, never through a planted link, and as strict JSON.

Other processes read them while this one may still be writing (the toolkit reads the workers' records, a user
reads a job summary with jq or JavaScript), so each is written to a temporary file of an unpredictable name in
the same folder and renamed over the target. The temporary file is created exclusively (O_EXCL): a symbolic
link planted at any name cannot redirect the write, and whatever fails, no temporary file is left behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from typing import Any

FILE_MODE = 0o644   # readable by the user who mounted the job folder, as open() would have made it


def write_atomically(path: str, text: str) -> None:
    """Write `text` to `path` (its folder made if missing): a reader sees the old file or the new one, never half
    of one. Raises OSError, having removed its temporary file."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def unwritable(folder: str) -> str | None:
    """Why files cannot be written in `folder` (made if missing), in words, or None when they can. Tried, not
    judged from permissions: root ignores them, and a read-only mount refuses root too."""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".opentc-probe-", dir=folder)
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return None


def finite(value: Any) -> Any:
    """`value` with every float that is not a number (nan, inf) replaced by None, in nested dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def strict_json(value: Any, indent: int | None = None) -> str:
    """JSON as RFC 8259 defines it: a value that is not a number becomes null, never the bare NaN or Infinity
    that Python writes by default and strict readers (jq, JavaScript) refuse."""
    return json.dumps(finite(value), indent=indent, allow_nan=False)


def write_json(path: str, value: Any, indent: int | None = None) -> None:
    """`value` as strict JSON, written atomically. Raises OSError."""
    write_atomically(path, strict_json(value, indent))


def read_json_object(path: str, max_bytes: int) -> dict | None:
    """The JSON object in a file this project wrote where another party may have changed it (the cache folder comes
    back from S3): None when it is missing, unreadable, over `max_bytes`, not UTF-8 JSON, nested too deep, or not an
    object. Its fields are the caller's to check."""
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
        value = json.loads(raw.decode("utf-8")) if len(raw) <= max_bytes else None
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None

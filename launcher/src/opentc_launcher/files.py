"""Files other processes read while this one may still be writing: written whole or not at all."""

from __future__ import annotations

import os


def write_atomically(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file renamed over it (its folder made if missing): a reader
    never sees half a file. Raises OSError."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)

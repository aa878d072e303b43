"""Where a backend keeps its persistent compilation cache, the same policy for every backend.

Layout: <root>/<compiler>-<version>-<device>/ (and a folder per process below it where the compiler needs one):
entries of another compiler version or device are never looked up, since they live in another folder, and the
root (by default under /opt/ml/checkpoints, which SageMaker's checkpoint sync carries to the next job) can hold
every backend's cache at once. Where a compiler cannot share a folder between writers, the first process to
lock a folder writes to it and a second one reads it without writing.
"""

from __future__ import annotations

import fcntl
import os

LOCK_FILE = ".opentc-writer.lock"
_held_locks: list[int] = []  # open lock files, kept for the life of the process (the lock ends with it)


def cache_folder(root: str, compiler: str, version: str, device: str, process: str = "") -> str:
    """<root>/<compiler>-<version>-<device>[/<process>]; the version without its local part (2.7.0+cu126: 2.7.0)."""
    folder = os.path.join(root, f"{compiler}-{version.split('+')[0]}-{device}")
    return os.path.join(folder, process) if process else folder


def take_writer_lock(folder: str) -> bool:
    """Whether this process is the folder's one writer (for the life of the process)."""
    fd = os.open(os.path.join(folder, LOCK_FILE), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _held_locks.append(fd)
    return True

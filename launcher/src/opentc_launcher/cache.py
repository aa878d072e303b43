"""The persistent compilation cache: compiled graphs kept on disk so the next identical job skips compiling.

Layout: <root>/torch_xla-<version>-<device>/rank<N>/ (rank<N>-spawned<K>/ for the processes a script starts
itself with torch_xla.launch or xmp.spawn). Entries of another torch-xla build or device are
never looked up (another folder); a corrupt entry is reported by torch-xla, compiled again and rewritten.
Two jobs may share a root: the first worker to lock a rank folder writes to it, a second one reads it
without writing, so no entry is ever written by two processes at once.
"""

from __future__ import annotations

import fcntl
import logging
import os

log = logging.getLogger("opentc_launcher")

LOCK_FILE = ".opentc-writer.lock"
_held_locks: list[int] = []  # open lock files, kept for the life of the process (the lock ends with it)


def cache_folder(root: str, torch_xla_version: str, device: str, process: str) -> str:
    return os.path.join(root, f"torch_xla-{torch_xla_version}-{device}", process)


def _take_writer_lock(folder: str) -> bool:
    fd = os.open(os.path.join(folder, LOCK_FILE), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _held_locks.append(fd)
    return True


def open_cache(root: str, device: str, process: str) -> dict:
    """Point torch-xla at this process's cache folder (before any computation). Never raises."""
    import torch_xla
    import torch_xla.runtime as xr

    folder = cache_folder(root, torch_xla.__version__.split("+")[0], device, process)
    try:
        os.makedirs(folder, exist_ok=True)
        writer = _take_writer_lock(folder)
    except OSError as e:
        log.warning("%s: persistent compilation cache off: %s is not usable (%s)", process, folder, e)
        return {"dir": "", "mode": "off", "error": str(e)}
    xr.initialize_cache(folder, readonly=not writer)
    mode = "read-write" if writer else "read-only (another job is writing this folder)"
    log.info("%s: persistent compilation cache %s (%s)", process, folder, mode)
    return {"dir": folder, "mode": mode}

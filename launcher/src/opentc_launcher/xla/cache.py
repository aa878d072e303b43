"""XLA's persistent compilation cache: compiled graphs kept on disk so the next identical job skips compiling.

One folder per process (cache_folders' policy: <root>/torch_xla-<version>-<device>/rank<N>/, and
rank<N>-spawned<K>/ for the processes a script starts itself with torch_xla.launch or xmp.spawn), because
torch-xla's cache has one writer per folder: the first worker to lock a folder writes to it, a second job's reads
it without writing. A corrupt entry is reported by torch-xla, compiled again and rewritten.
"""

from __future__ import annotations

import logging
import os

from ..cache_folders import cache_folder, take_writer_lock

log = logging.getLogger("opentc_launcher")


def open_cache(root: str, device: str, process: str) -> dict:
    """Point torch-xla at this process's cache folder (before any computation). Never raises."""
    import torch_xla
    import torch_xla.runtime as xr

    folder = cache_folder(root, "torch_xla", torch_xla.__version__, device, process)
    try:
        os.makedirs(folder, exist_ok=True)
        writer = take_writer_lock(folder)
    except OSError as e:
        log.warning("%s: persistent compilation cache off: %s is not usable (%s)", process, folder, e)
        return {"dir": "", "mode": "off", "error": str(e)}
    xr.initialize_cache(folder, readonly=not writer)
    mode = "read-write" if writer else "read-only (another job is writing this folder)"
    log.info("%s: persistent compilation cache %s (%s)", process, folder, mode)
    return {"dir": folder, "mode": mode}

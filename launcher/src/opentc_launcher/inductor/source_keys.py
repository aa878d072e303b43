"""Inductor's hashes of torch's and Triton's sources, kept per installation in the cache folder.

Every process that compiles hashes the installed sources of torch and Triton once (torch 2.14:
`codecache.torch_key()` and `codecache.triton_key()`, part of every cache key): on the 2-core CPU, 0.23 s and 0.45 s of
a warm job's first compilation, where the kernels themselves come from the cache. The sources do not change between
two jobs on one image, so a job keeps the two values in the Inductor cache folder beside the name of the installation
they were computed on (each file's path, size and modification time under torch's and Triton's folders: 30-50 ms to
read, and what an image's layers keep from one host to the next), and the next job on that installation gives them to
torch (the caches' own `set()`, torch's way of filling them ahead) instead of hashing again. Another installation, a
changed file, or a torch whose caches cannot be filled ahead (2.7) hashes as before.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from collections.abc import Iterator
from typing import Any

from ..files import read_json_object, write_json

log = logging.getLogger("opentc_launcher")

KEYS_FILE = "opentc-source-keys.json"
MAX_KEYS_BYTES = 1 << 20     # Triton's key is its version and a hash of each of its sources: tens of kilobytes at most
PACKAGES = ("torch", "triton")
SKIPPED = {"torch": ("include",)}   # C++ headers: no module, so neither hash reads them (and 9,500 files to look at)


def _files(root: str, skipped: tuple[str, ...]) -> Iterator[tuple[str, int, int]]:
    """Every regular file under `root` (its folders in `skipped` left out): its path below root, size, mtime."""
    folders = [root]
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if os.path.relpath(entry.path, root) not in skipped:
                        folders.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    yield os.path.relpath(entry.path, root), st.st_size, st.st_mtime_ns


def installation() -> str:
    """The name of the installed torch and Triton, as far as their hashes go: a digest of each file's path, size and
    modification time under their folders (a package that is not installed counts as such)."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.origin:
            digest.update(f"{package}: not installed\n".encode())
            continue
        root = os.path.dirname(spec.origin)
        digest.update(f"{package}: {root}\n".encode("utf-8", "surrogateescape"))
        for path, size, mtime in sorted(_files(root, SKIPPED.get(package, ()))):
            digest.update(f"{path}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _caches(codecache: Any) -> tuple[Any, Any] | None:
    """torch's two memoized hashes, where torch lets them be filled ahead (2.14's prefetchable_cache); else None."""
    keys = (getattr(codecache, "torch_key", None), getattr(codecache, "triton_key", None))
    return keys if all(callable(getattr(key, "set", None)) for key in keys) else None


def _valid(kept: dict) -> bool:
    """The file comes back from S3 with the cache folder: its shape is checked before torch is given anything."""
    torch_key, triton_key = kept.get("torch_key"), kept.get("triton_key")
    if not (isinstance(torch_key, str) and len(torch_key) == 64):
        return False
    try:
        bytes.fromhex(torch_key)
    except ValueError:
        return False
    return triton_key is None or isinstance(triton_key, str)


class SourceKeys:
    """The two hashes for one process: given to torch from the folder before the first compilation's cache keys, or
    kept there after it."""

    def __init__(self, folder: str):
        self.folder = folder
        self.installation = ""
        self.given = False

    def give(self) -> str:
        """Before the first compilation computes a cache key: fill torch's two caches from the folder where they were
        kept for this installation. What happened, in words."""
        from torch._inductor import codecache

        caches = _caches(codecache)
        if caches is None:
            return "not on this torch: its source hashes cannot be given ahead"
        self.installation = installation()
        kept = read_json_object(os.path.join(self.folder, KEYS_FILE), MAX_KEYS_BYTES)
        if kept is None or kept.get("installation") != self.installation or not _valid(kept):
            return "hashed here: none kept for this installation yet"
        torch_key, triton_key = caches
        try:
            torch_key.set(bytes.fromhex(kept["torch_key"]))
            triton_key.set(kept["triton_key"])
        except RuntimeError as e:      # computed already (a compilation before ours): torch's own values stand
            return f"hashed here: {e}"
        self.given = True
        return "given from the cache folder: kept for this installation"

    def keep(self) -> None:
        """After the first compilation (which computed both): keep them for this installation, unless given."""
        if self.given or not self.installation:
            return
        from torch._inductor import codecache

        caches = _caches(codecache)
        if caches is None:
            return
        torch_key, triton_key = (cache() for cache in caches)   # memoized by the compilation: no hashing here
        try:
            write_json(os.path.join(self.folder, KEYS_FILE),
                       {"installation": self.installation, "torch_key": torch_key.hex(), "triton_key": triton_key})
        except OSError as e:
            log.info("torch's source hashes could not be kept in %s (%s): the next job hashes them again",
                     self.folder, e)

"""A compilation cache that a job compiles into a copy of, and that is published back whole after a success.

Some compilers write their cache in place and cannot recover from a damaged entry: Inductor has gcc write each
kernel's `.so` straight to its final name and loads any file found there, so one stop during a link (a spot
interruption, a SIGKILL) leaves a half-written library that every later job loads and fails on; the cache lives in
/opt/ml/checkpoints, which SageMaker syncs to S3 and restores, so the damage would follow a project from job to job.
Here the folder the workers use is a working copy; the published folder only ever changes by a complete
replacement, and only after a job that succeeded:

- `open()`, before the workers start: the published files are copied into the working folder, each checked against
  the manifest that its publication wrote (size and SHA-256). A published cache that is damaged, or has no
  manifest (written by hand, or before this check existed), is set aside (renamed `<name>.set-aside-<time>`, the
  newest one kept for a look) and the job compiles from nothing: an unusable cache never fails a job that would
  train without it. A read-only published folder is used as it is, and not updated.
- `publish()`, after a successful job: the working folder is copied into `<name>.new-<random>` with its manifest
  written last, then renamed into place (the old one renamed away first, then removed). A publication cut
  between its two renames leaves a complete `.new-` folder, which the next `open()` adopts.

Writers of one published folder (jobs sharing a checkpoints folder: a sweep, two local runs, a retried job) take turns
on a lock file beside it for everything that reads or changes the published folder: the copy `open()` makes, and
publication's final renames; so each job sees the old cache or the new one, whole. A publication copies without that
lock, so the `.new-` folder it fills carries its own (PUBLISHING, held while its publisher lives: the kernel lets go
of it when the process ends, however): `open()` clears only the `.new-` folders whose publisher is gone.

The published path may be a symbolic link to a folder (a cache shared between projects): the folder it names is
the one replaced, and the link stays. Anything else where the folder should be (a file, a link to one) is set aside
like a damaged cache.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .files import unwritable, write_json

log = logging.getLogger("opentc_launcher")

MANIFEST = ".opentc-manifest.json"
PUBLISHING = ".opentc-publishing.lock"   # in a `.new-` folder: held (flock) by its publisher while it lives
MANIFEST_FORMAT = "opentc-cache-manifest/1"
LOCK = ".opentc-publish.lock"
# A writer's state, not part of a cache: lock files and folders, and temporary files (Inductor's `.<pid>.<tid>.tmp`,
# Triton's `tmp.pid_<pid>_<id>` folders).
_SKIPPED_FOLDERS = ("locks",)
_SKIPPED_SUFFIXES = (".lock", ".tmp")
_SKIPPED_PREFIXES = ("tmp.pid_",)
_CHUNK = 1 << 20
LOCK_WAIT = 120.0   # seconds: another job copying or publishing the same cache; nothing waits forever


class LockBusy(OSError):
    """Another job kept the publication lock longer than LOCK_WAIT."""


class LockUnavailable(OSError):
    """The publication lock cannot be taken at all: its file cannot be opened or made (another user's, a folder, a
    link, where it should be). The job runs without publishing (the cache is never a reason for a job to fail)."""


class StopRequested(Exception):
    """The job is stopping: a wait for the lock, or a publication, given up."""


def _never() -> bool:
    return False


class DamagedCache(Exception):
    """The published cache cannot be used: the message says which file, and how it differs."""


def _skipped(relative: str) -> bool:
    parts = relative.split(os.sep)
    return (parts[0] in _SKIPPED_FOLDERS or parts[-1] == MANIFEST or parts[-1].endswith(_SKIPPED_SUFFIXES)
            or any(part.startswith(_SKIPPED_PREFIXES) for part in parts))


def _files(folder: str) -> Iterator[str]:
    """The cache's files under `folder`, relative to it (links and a writer's state left out)."""
    for top, subfolders, names in os.walk(folder):
        subfolders.sort()
        for name in sorted(names):
            path = os.path.join(top, name)
            relative = os.path.relpath(path, folder)
            if os.path.isfile(path) and not os.path.islink(path) and not _skipped(relative):
                yield relative


def _copy_hashing(source: str, target: str) -> tuple[int, str]:
    """Copy one file (its folder made), returning its size and SHA-256."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with open(source, "rb") as src, open(target, "xb") as dst:
        for chunk in iter(lambda: src.read(_CHUNK), b""):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    shutil.copymode(source, target)
    return size, digest.hexdigest()


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _publisher_alive(staged: str) -> bool:
    """Whether the publication filling `staged` (a `.new-` folder) is still under way: its publisher holds the claim
    inside it. A folder without a claim (taken just before the final rename, or never made) is no one's."""
    try:
        fd = os.open(os.path.join(staged, PUBLISHING), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)   # closing lets go of a claim this took, if it took one
    return False


def _remove(path: str) -> None:
    """A folder, a file or a link, gone (never following a link)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(path)


def _read_manifest(folder: str) -> dict[str, dict]:
    """{relative path: {size, sha256}} from the folder's manifest; DamagedCache when it is missing or malformed."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise DamagedCache(f"it has no manifest ({MANIFEST}), so its files cannot be checked (written by hand, by "
                           f"another tool, or before this check existed)") from None
    except (OSError, ValueError, RecursionError) as e:
        raise DamagedCache(f"its manifest {MANIFEST} cannot be read ({type(e).__name__}: {e})") from None
    files = data.get("files") if isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT else None
    if not isinstance(files, dict):
        raise DamagedCache(f"its manifest {MANIFEST} is not of format {MANIFEST_FORMAT}")
    for relative, entry in files.items():
        inside = (isinstance(relative, str) and relative and not os.path.isabs(relative)
                  and os.path.normpath(relative) == relative and os.pardir not in relative.split(os.sep))
        if not inside or not isinstance(entry, dict) or not isinstance(entry.get("size"), int) \
                or not isinstance(entry.get("sha256"), str):
            raise DamagedCache(f"its manifest {MANIFEST} lists {relative!r} with {entry!r}, which is not a file "
                               f"inside the cache with its size and SHA-256")
    return files


@dataclass
class WorkingCopy:
    """The published cache folder and the working folder the workers compile in (see the module's docstring)."""

    published: str
    working: str
    writable: bool = False     # whether publish() can replace the published folder (known after open())
    why_not_writable: str = ""   # when it cannot, why (for the log)

    @property
    def folder(self) -> str:
        """The folder that is read and replaced: the published path, or the one a link there names (made by the first
        publication when it does not exist yet)."""
        return os.path.realpath(self.published) if os.path.islink(self.published) else self.published

    @property
    def root(self) -> str:
        return os.path.dirname(self.folder)

    @property
    def name(self) -> str:
        return os.path.basename(self.folder)

    # -- before the workers --------------------------------------------------------------------------------------
    def open(self, stopped: Callable[[], bool] = _never) -> str:
        """Fill the working folder from the published cache, or start it empty; what was found, for the log. Raises
        only OSError for the working folder itself (the launcher's own scratch space). `stopped` says when the job
        is stopping: a wait for another job's lock then ends at once."""
        started = time.monotonic()
        if os.path.realpath(self.working) == os.path.realpath(self.folder):
            raise OSError(f"the working copy {self.working} is the published cache itself")
        os.makedirs(self.working, exist_ok=True)
        self._not_writable(None if unwritable(self.root) is None else f"{self.root} is not writable")
        try:
            with self._lock(stopped):
                if self.writable:
                    self._recover_interrupted_publication()
                said = self._fill()
        except LockBusy as e:
            self._not_writable(str(e))
            return f"not used: {e}; compiling from nothing, and not publishing"
        except StopRequested:
            self._not_writable("the job is stopping")
            return "not used: the job is stopping"
        except LockUnavailable as e:
            # As for a folder that cannot be written: read as it is (each file checked against its manifest, so a
            # publication under way elsewhere at worst makes it unusable), and this job's entries not kept.
            self._not_writable(str(e))
            said = f"{self._fill()}; {e}, so the cache is used as it is and this job's new entries are not published"
        else:
            if not self.writable:
                said += (f"; {self.root} is not writable, so the cache is used as it is and this job's new entries "
                         f"are not kept")
        return f"{said} ({time.monotonic() - started:.2f} s)"

    def _not_writable(self, why: str | None) -> None:
        self.writable, self.why_not_writable = why is None, why or ""

    def _fill(self) -> str:
        folder = self.folder
        if os.path.exists(folder) and not os.path.isdir(folder):   # a file (or a link to one) where it should be
            what = f"a link to the file {folder}" if folder != self.published else "a file"
            return (f"set aside: {self.published} is {what}, not a folder; {self._set_aside(self.published)}; "
                    f"compiling from nothing")
        if not os.path.isdir(folder):
            return f"cold: nothing published in {self.published} yet"
        try:
            count, size = self._copy_checked()
        except DamagedCache as e:
            shutil.rmtree(self.working, ignore_errors=True)
            os.makedirs(self.working, exist_ok=True)
            return (f"set aside: {self.published} cannot be used, {e}; {self._set_aside(self.folder)}; compiling from "
                    f"nothing")
        except OSError as e:
            shutil.rmtree(self.working, ignore_errors=True)
            os.makedirs(self.working, exist_ok=True)
            return f"not used: {self.published} could not be read ({type(e).__name__}: {e}); compiling from nothing"
        linked = f" (a link to {self.folder})" if self.folder != self.published else ""
        return f"warm: {count} files ({_size(size)}){linked} checked against its manifest and copied"

    def _copy_checked(self) -> tuple[int, int]:
        folder = self.folder
        manifest = _read_manifest(folder)
        total = 0
        for relative, entry in sorted(manifest.items()):
            source = os.path.join(folder, relative)
            if os.path.islink(source) or not os.path.isfile(source):
                raise DamagedCache(f"{relative} is missing (or not a regular file)")
            size, digest = _copy_hashing(source, os.path.join(self.working, relative))
            if size != entry["size"] or digest != entry["sha256"]:
                raise DamagedCache(f"{relative} is damaged ({size} bytes where {entry['size']} were published, or "
                                   f"other contents)")
            total += size
        return len(manifest), total

    def _set_aside(self, path: str) -> str:
        """Rename `path` (the published folder, or what stands in its place) away, the newest kept for a look."""
        if not self.writable:
            return "left in place (its folder is not writable)"
        target = f"{path}.set-aside-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
        try:
            os.rename(path, target)
        except OSError as e:
            return f"could not be set aside ({e})"
        for older in self._siblings(".set-aside-"):
            if older != target:
                _remove(older)
        return f"set aside as {target}"

    def _recover_interrupted_publication(self) -> None:
        """Under the lock: the `.new-` folders of publications whose publisher is gone (a stop, a kill) are adopted
        (a complete one, when nothing is published) or removed; those of a publication in progress are left alone."""
        abandoned = [p for p in self._siblings(".new-") if not _publisher_alive(p)]
        complete = [p for p in abandoned if os.path.isfile(os.path.join(p, MANIFEST))]
        if not os.path.lexists(self.folder) and complete:
            newest = max(complete, key=os.path.getmtime)
            os.rename(newest, self.folder)
            log.info("compilation cache: adopted %s, a publication cut short by a stop", newest)
        for leftover in abandoned + self._siblings(".old-"):
            _remove(leftover)

    # -- after a successful job ----------------------------------------------------------------------------------
    def publish(self, stopped: Callable[[], bool] = _never) -> str:
        """Make the working folder the published cache; what was done, for the log. Raises OSError (having removed
        what it wrote) when the published folder cannot be written, and StopRequested (the same) when `stopped`
        says the job is stopping, while waiting for the lock or between two files."""
        if not self.writable:
            return f"not published: {self.why_not_writable or f'{self.root} is not writable'}"
        started = time.monotonic()
        try:
            with self._lock(stopped):   # made and claimed together: no other job's open() can see it unclaimed
                staged = tempfile.mkdtemp(prefix=f"{self.name}.new-", dir=self.root)
                claim = os.open(os.path.join(staged, PUBLISHING), os.O_CREAT | os.O_RDWR, 0o644)
                fcntl.flock(claim, fcntl.LOCK_EX)
        except LockUnavailable as e:
            return f"not published: {e}"
        try:
            os.chmod(staged, 0o755)   # as os.makedirs would have made it (mkdtemp's is private)
            files, total = {}, 0
            for relative in _files(self.working):
                if stopped():
                    raise StopRequested(f"the job is stopping: the publication to {self.folder} was given up")
                size, digest = _copy_hashing(os.path.join(self.working, relative), os.path.join(staged, relative))
                files[relative] = {"size": size, "sha256": digest}
                total += size
            # Last: a folder with its manifest is complete.
            write_json(os.path.join(staged, MANIFEST), {"format": MANIFEST_FORMAT, "files": files})
            with self._lock(stopped):
                os.unlink(os.path.join(staged, PUBLISHING))   # not part of the cache; the rename follows at once
                previous = f"{self.folder}.old-{uuid.uuid4().hex}"
                replaced = os.path.isdir(self.folder)
                if replaced:
                    os.rename(self.folder, previous)
                os.rename(staged, self.folder)
            if replaced:
                shutil.rmtree(previous, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        finally:
            os.close(claim)
        linked = f" (through the link {self.published})" if self.folder != self.published else ""
        return (f"published {len(files)} files ({_size(total)}) to {self.folder}{linked} "
                f"({time.monotonic() - started:.2f} s)")

    # -- helpers -------------------------------------------------------------------------------------------------
    def _siblings(self, marker: str) -> list[str]:
        try:
            names = os.listdir(self.root)
        except OSError:
            return []
        prefix = self.name + marker
        return [os.path.join(self.root, n) for n in names if n.startswith(prefix)]


    @contextlib.contextmanager
    def _lock(self, stopped: Callable[[], bool]) -> Iterator[None]:
        """The publication lock beside the published folder (no lock where the folder cannot be written); waits at
        most LOCK_WAIT seconds for another job (then LockBusy), and no longer than `stopped` says (StopRequested).
        LockUnavailable when its file cannot be opened or made."""
        if not self.writable:
            yield
            return
        path = os.path.join(self.root, LOCK)
        fd = _open_lock(path)
        try:
            deadline = time.monotonic() + LOCK_WAIT
            said = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if stopped():
                        raise StopRequested(f"the job is stopping: no longer waiting for {path}") from None
                    if time.monotonic() >= deadline:
                        raise LockBusy(f"another job has held {path} for over {LOCK_WAIT:g} s") from None
                    if not said:
                        log.info("compilation cache: another job holds %s: waiting up to %g s", path, LOCK_WAIT)
                        said = True
                    time.sleep(0.2)
            yield
        finally:
            os.close(fd)


def _open_lock(path: str) -> int:
    """The lock file, opened (made when missing) for flock, which needs no write access. Never through a link (one
    planted at its name would make a file wherever it points) and never anything but a regular file (a FIFO would
    block the open). LockUnavailable, in words, otherwise."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        what = "is a link" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})"
        raise LockUnavailable(f"the lock {path} {what}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockUnavailable(f"the lock {path} is not a regular file")
    return fd

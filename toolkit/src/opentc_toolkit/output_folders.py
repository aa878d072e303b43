"""The job's output folders, checked before anything of the user's is installed or started: model/ and output/data
must be folders (SageMaker makes them; a job folder run by hand may lack them), and output/data (with the compiler on,
output/data/compiler too) must take files: the job summary, the compile report and the verdict go there.

A real run makes what is missing and tries a file in each folder (tried, not judged from permissions: root ignores
them, and a read-only mount refuses root too). A dry run writes nothing: it finds what stands in the way from what is
there (a file where a folder goes, a folder that cannot be written, a read-only mount), and refuses with the words the
job would use."""

from __future__ import annotations

import errno
import os

from opentc_launcher.common import unwritable

from .job import JobPaths
from .not_started import BadInput


def check_output_folders(paths: JobPaths, compiler_on: bool, create: bool) -> None:
    """BadInput naming the first output folder the job cannot use and what it must be; with `create`, what is
    missing is made."""
    written = (paths.output_data, *((paths.compiler_output,) if compiler_on else ()))
    for folder in (paths.output_data, paths.model, *written[1:]):
        problem = _in_the_way(folder)
        if problem is None and create and folder != paths.compiler_output:   # unwritable() makes that one
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as e:
                problem = f"{type(e).__name__}: {e.strerror or e}"
        if problem:
            raise BadInput(f"the job folder cannot hold its output: {folder} cannot be created ({problem}); model/ "
                           f"and output/ must be writable folders.")
    for folder in written:
        problem = unwritable(folder) if create else _cannot_write(folder)
        if problem:
            raise BadInput(f"the job folder cannot hold its output: nothing can be written in {folder} "
                           f"({problem}); output/data must be a writable folder (SageMaker's always is; a "
                           f"job folder mounted by hand must be mounted read-write).")


def _existing(folder: str) -> str:
    """`folder`, or the nearest folder above it that exists (what making it would start from)."""
    path = folder
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _in_the_way(folder: str) -> str | None:
    """A file where `folder` or a folder above it goes, in words; None when it is a folder or can be made one."""
    path = _existing(folder)
    if os.path.isdir(path):
        return None
    return f"{path} is a file, not a folder" if os.path.lexists(path) else f"{path} does not exist"


def _cannot_write(folder: str) -> str | None:
    """Why files could not be written in `folder` (or it made, where it is missing), without writing: its own
    permissions, or a read-only mount; None when they could."""
    path = _existing(folder)
    if os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK):
        return None
    read_only = os.path.isdir(path) and bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    code = errno.EROFS if read_only else errno.EACCES
    return f"{'OSError' if read_only else 'PermissionError'}: {os.strerror(code)}"

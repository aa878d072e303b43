"""The installed files of the packages an install is about to replace, kept aside so that a failed install can be
undone without the network: each file the package's RECORD lists is hard-linked into a folder of the job's scratch
(copied where no link can be made, across file systems), and put back once pip has uninstalled what the install
brought. The job's environment is then as it was before the install, whatever the install left (pip ends a failed
install with the packages it had already replaced left replaced)."""

from __future__ import annotations

import contextlib
import importlib.metadata as metadata
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from .stack import canonical


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Backup:
    folder: str
    versions: dict[str, str | None]       # {canonical name: version before the install, None where none was}
    files: tuple[tuple[str, str], ...]    # (where the file was installed, its kept copy)
    missing: tuple[str, ...]              # installed packages whose files no RECORD lists: they cannot be put back

    def changed(self) -> list[str]:
        """The packages whose installed version is no longer the one before the install (moved, added, removed)."""
        return [name for name, version in self.versions.items() if installed_version(name) != version]

    def put_back(self) -> None:
        """Every kept file where it was (what pip removed since, or replaced); a file still there is left alone."""
        for installed, kept in self.files:
            with contextlib.suppress(FileNotFoundError):
                if os.path.samefile(installed, kept):
                    continue
            os.makedirs(os.path.dirname(installed), exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(installed)
            try:
                os.link(kept, installed)
            except OSError:
                shutil.copy2(kept, installed)


def keep(names: Iterable[str], folder: str) -> Backup:
    """The files of the installed packages among `names` (canonical), kept in `folder`; every name's version (None
    for one not installed) is remembered, so that what the install adds is known as added."""
    versions: dict[str, str | None] = {}
    files: list[tuple[str, str]] = []
    missing: list[str] = []
    for name in dict.fromkeys(canonical(n) for n in names):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
            continue
        versions[name] = dist.version
        if dist.files is None:
            missing.append(name)
            continue
        for path in dist.files:
            installed = os.path.normpath(os.path.abspath(str(dist.locate_file(path))))
            if not os.path.isfile(installed):
                continue
            kept = os.path.join(folder, os.path.relpath(installed, "/"))
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            try:
                os.link(installed, kept)
            except OSError:
                shutil.copy2(installed, kept)
            files.append((installed, kept))
    return Backup(folder, versions, tuple(files), tuple(missing))

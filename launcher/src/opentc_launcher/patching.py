"""Small, version-guarded fixes to libraries, and how they are applied: the XLA backend's (xla/library_patches.py)
and those every backend applies to a Training Compiler era script (era_patches.py).

- each patch waits for its target module to be imported by the script (nothing is imported early),
- checks that the target still has the code it was written for, and refuses to apply otherwise (logged), so a new
  library version can never be patched blindly,
- is logged by name when armed and when applied,
- and all of them are switched off with `--library-patches false` (or what the front end that started the launch
  calls it: setting_names).
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from .after_import import when_imported

log = logging.getLogger("opentc_launcher")


class TargetChanged(Exception):
    """The code a patch was written for is not there (any more): the patch is not applied, and the log warns."""


class NotNeeded(TargetChanged):
    """The installed version never had the problem the patch fixes (a fix for transformers 4.x, under transformers
    5): the patch is not applied, quietly."""


@dataclass(frozen=True)
class LibraryPatch:
    name: str                          # how the logs and the docs call it
    module: str                        # applied right after this module is imported
    why: str
    apply: Callable[[ModuleType], None]   # raises TargetChanged when the module is not what it expects
    unpatched: str = "the host reads it removes stay"   # what the job keeps when it is not applied


def source_of(obj: object) -> str:
    try:
        return inspect.getsource(obj)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""


def apply(patch: LibraryPatch, module: ModuleType) -> bool:
    version = getattr(sys.modules.get(patch.module.split(".")[0]), "__version__", "?")
    try:
        patch.apply(module)
    except NotNeeded as e:
        log.debug("library patch %s not needed for %s %s: %s", patch.name, patch.module.split(".")[0], version, e)
        return False
    except TargetChanged as e:
        log.warning("library patch %s not applied: %s (%s %s); %s. Tell the image's maintainers.", patch.name, e,
                    patch.module.split(".")[0], version, patch.unpatched)
        return False
    log.info("library patch %s applied to %s %s: %s", patch.name, patch.module.split(".")[0], version, patch.why)
    return True


def _apply_when_imported(patch: LibraryPatch, module: ModuleType) -> None:
    apply(patch, module)


def arm(patches: tuple[LibraryPatch, ...], what: str, off: str) -> list[str]:
    """Arm every patch: applied now if its module is already imported, else right after its import (whoever
    imports it). `what` says whose patches they are, `off` how to switch them off. Returns the names armed."""
    for patch in patches:
        when_imported(patch.module, functools.partial(_apply_when_imported, patch))
    names = [p.name for p in patches]
    log.info("library patches armed %s: %s (off with %s)", what, ", ".join(names), off)
    return names

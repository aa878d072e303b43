"""What a change to another library's code is, and how one is made: the ledger's entries (library_changes.py gathers
them all, and `train --dry-run` lists them).

Every place where the image puts its own code in place of a library's (a wrapper, a replaced function, a registered
module) is a LibraryChange, of one of four kinds:

- a patch changes what the library does (a fix, or a host read taken out); all of them are off with
  `--library-patches false` (or what the front end calls that setting: setting_names);
- a compile-time default's change (regional compilation's torch.compile, Inductor only) is off by the default's own
  name (`--defaults-off`), and with the patches;
- the launch's own (the worker's set-up carried into processes the script starts, a process group the launcher made
  kept when the script makes it again) is what the launch needs, whatever the patches;
- an observer only looks (counts reads, times steps, sees the model, finds a problem): it changes no result, and
  stays with the patches off.

Each one waits for its module to be imported by the script (nothing is imported early), checks that its target is
still the code it was written for and refuses otherwise (a new library version is never patched blindly: the log warns
and the job summary has a finding), and is logged by name when made. What is known of the versions each applies to is
declared beside it (Known, and the images' own versions in library_changes.ON_THE_IMAGES, which tests prove).
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .after_import import when_imported

log = logging.getLogger("opentc_launcher")

# The kinds of change.
PATCH = "patch"
DEFAULT = "compile-time default"
LAUNCH = "the launch's own"
OBSERVER = "observer"
KINDS = (PATCH, DEFAULT, LAUNCH, OBSERVER)

# What a change does on a given version of its library.
APPLIES = "applies"
NOT_NEEDED = "not needed"
REFUSED = "would fail its guard"


class TargetChanged(Exception):
    """The code a change was written for is not there (any more): it is not made, the log warns and the worker's
    record has a finding."""


class NotNeeded(TargetChanged):
    """The installed version never had the problem the patch fixes (a fix for transformers 4.x, under transformers
    5): the patch is not applied, quietly."""


@dataclass(frozen=True)
class Known:
    """What a change does on some versions of its library, and the test that shows it."""

    distribution: str      # as pip names it: transformers, torch-xla
    versions: tuple[str, ...]   # the versions shown, each as the distribution gives it: ("4.38.0",)
    status: str            # APPLIES, NOT_NEEDED or REFUSED
    evidence: str          # where it is shown: a test


# The distribution a top-level module comes from, where the names differ.
DISTRIBUTIONS = {"torch_xla": "torch-xla"}


@dataclass(frozen=True)
class LibraryChange:
    name: str                          # how the logs and the docs call it
    module: str                        # made right after this module is imported
    target: str                        # what it replaces or wraps, by its dotted name
    why: str                           # what it does and why
    # What makes the change: called with the module for a patch; a hook of an observer's (or the launch's) own, which
    # its owner binds to itself when it arms the change (arm_change). Named here so that the ledger knows every
    # function that changes a library's code (tests/test_library_changes.py).
    apply: Callable[..., Any]
    kind: str = PATCH
    backend: str = ""                  # the one backend that makes it; "" for every backend
    unpatched: str = "the host reads it removes stay"   # what the job keeps when it is not made
    on_the_images: str = APPLIES       # what it does on the images' own versions (library_changes.ON_THE_IMAGES)
    known: tuple[Known, ...] = ()      # what is known of other versions
    default: str = ""                  # DEFAULT: the compile-time default it belongs to

    @property
    def distribution(self) -> str:
        top = self.module.split(".")[0]
        return DISTRIBUTIONS.get(top, top)

    def off_switch(self, patches_off: str, defaults_off: str = "--defaults-off") -> str:
        """Its off switch, in words (`patches_off`: the library-patches setting as the front end names it)."""
        if self.kind == PATCH:
            return patches_off
        if self.kind == DEFAULT:
            return f"{defaults_off} {self.default}"
        if self.kind == LAUNCH:
            return "none: the launch needs it"
        return "none: it changes no result"


@dataclass(frozen=True)
class Refusal:
    """A change that could not be made in this process: its target was not the code it was written for."""

    change: LibraryChange
    reason: str
    version: str

    def finding(self) -> str:
        change = self.change
        return (f"library {change.kind} {change.name} was not made: {self.reason} ({change.distribution} "
                f"{self.version}), so {change.unpatched}. Its target, {change.target}, is not the code it "
                f"was written for: this version of {change.distribution} is not one the image knows (`train "
                f"--dry-run` lists every change to library code and what it does on the versions installed); tell "
                f"the image's maintainers.")


_refused: list[Refusal] = []   # this process's, in order: a worker's record turns them into findings
_made: list[str] = []          # the names of the changes made in this process through apply, in order


def refused() -> list[Refusal]:
    """The changes this process could not make, so far."""
    return list(_refused)


def made() -> list[str]:
    """The changes this process made when their modules were imported (arm_change), so far."""
    return list(_made)


def source_of(obj: object) -> str:
    try:
        return inspect.getsource(obj)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""


def installed_version(module_name: str) -> str:
    return str(getattr(sys.modules.get(module_name.split(".")[0]), "__version__", "?"))


def apply(change: LibraryChange, module: ModuleType, make: Callable[[ModuleType], Any] | None = None) -> bool:
    """Make `change` on `module` (with `make`, a hook its owner bound, else change.apply); whether it was made. A
    change that cannot be made never fails the script: it is logged, and a refusal is kept for the worker's record."""
    version = installed_version(change.module)
    library = change.module.split(".")[0]
    try:
        (make or change.apply)(module)
    except NotNeeded as e:
        log.debug("library %s %s not needed for %s %s: %s", change.kind, change.name, library, version, e)
        return False
    except Exception as e:  # noqa: BLE001  (TargetChanged, or a target this code cannot handle: the job goes on)
        reason = str(e) if isinstance(e, TargetChanged) else f"{type(e).__name__}: {e}"
        _refused.append(Refusal(change, reason, version))
        log.warning("library %s %s not applied: %s (%s %s); %s. Tell the image's maintainers.", change.kind,
                    change.name, reason, library, version, change.unpatched)
        return False
    _made.append(change.name)
    said = log.debug if change.kind == OBSERVER else log.info
    said("library %s %s applied to %s %s: %s", change.kind, change.name, library, version, change.why)
    return True


def _apply_when_imported(change: LibraryChange, make: Callable[[ModuleType], Any] | None, module: ModuleType) -> None:
    apply(change, module, make)


def arm_change(change: LibraryChange, make: Callable[[ModuleType], Any] | None = None) -> None:
    """Make `change` now if its module is already imported, else right after its import (whoever imports it)."""
    when_imported(change.module, functools.partial(_apply_when_imported, change, make))


def arm(patches: tuple[LibraryChange, ...], what: str, off: str) -> list[str]:
    """Arm every patch (arm_change). `what` says whose patches they are, `off` how to switch them off. Returns the
    names armed."""
    for patch in patches:
        arm_change(patch)
    names = [p.name for p in patches]
    log.info("library patches armed %s: %s (off with %s)", what, ", ".join(names), off)
    return names

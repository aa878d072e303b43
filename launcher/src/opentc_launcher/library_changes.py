"""The ledger: every change the image makes to another library's code (patching.py says what one is), in one list,
with what each does on the versions a job would run.

What is known of a version comes first: the images' own versions (ON_THE_IMAGES, which tests prove: each change does
there what it declares, tests/test_library_changes.py in CI's venv and tests/container/test_image.py in each image),
then what each change declares it was shown to do elsewhere (patching.Known). A version the ledger does not know that is
installed here (an image built FROM this one with other pins) is checked for real, in a child process that makes every
change and throws itself away; one that a requirements.txt would install is not known until the job runs, where a
change that cannot be made is a finding in the job summary.

    python -m opentc_launcher.library_changes            the ledger, every change
    python -m opentc_launcher.library_changes --verify   each change here does what the ledger says (exit 1 if not)
    python -m opentc_launcher.library_changes --check [--json] [NAME...]   make them here and say what happened
    python -m opentc_launcher.library_changes --table docs/versions.md    rewrite the page's table of them
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType

from . import era_patches, host_reads, ignored_fp16, measurements, model_watch, sync_free_step, uneven_shards
from .options import WorkerOptions
from .patching import (
    APPLIES,
    DEFAULT,
    LAUNCH,
    NOT_NEEDED,
    OBSERVER,
    PATCH,
    REFUSED,
    Known,
    LibraryChange,
    NotNeeded,
    TargetChanged,
)
from .registry import BACKENDS, backend_named
from .setting_names import option_setting, setting

NOT_INSTALLED = "not installed here"
PATCHES_OFF = option_setting("library_patches", "false")
DEFAULTS_OFF = option_setting("defaults_off")
CHECK_TIMEOUT = 300.0   # seconds for the child that makes every change (importing transformers and torch-xla)

# What every worker changes, whatever the backend; each backend adds its own (CompilerBackend.library_changes).
EVERY_BACKEND: tuple[LibraryChange, ...] = (
    *era_patches.PATCHES, *sync_free_step.PATCHES, host_reads.CHANGE, measurements.BATCHES_COUNTED,
    *model_watch.CHANGES, uneven_shards.CHANGE, ignored_fp16.CHANGE)

# The versions each image installs (constraints.txt and stacks/<flavour>.txt; a test holds these to them), and the
# backends it has. A pin that moves fails that test until each change is shown to do what it declares on the new one.
_SHARED = {"transformers": "5.20.2", "accelerate": "1.15.0", "safetensors": "0.8.0"}
ON_THE_IMAGES: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "xla": {**_SHARED, "torch": "2.7.0", "torch-xla": "2.7.0"},
    "inductor": {**_SHARED, "torch": "2.14.1"}})
FLAVOUR_BACKENDS = MappingProxyType({"xla": ("eager", "xla", "inductor"), "inductor": ("eager", "inductor")})
IMAGES_EVIDENCE = "the images' own version, tested"   # tests/test_library_changes.py, tests/container/test_image.py


def ledger() -> tuple[LibraryChange, ...]:
    """Every change, those of every backend first."""
    return (*EVERY_BACKEND, *(change for backend in BACKENDS.values() for change in backend.library_changes))


def for_backend(name: str) -> tuple[LibraryChange, ...]:
    """The changes a worker of backend `name` may make."""
    return (*EVERY_BACKEND, *backend_named(name).library_changes)


def known_status(change: LibraryChange, version: str) -> Known | None:
    """What is known of `change` on `version` of its library, or None."""
    dist = change.distribution
    for flavour, pins in ON_THE_IMAGES.items():
        if (not change.backend or change.backend in FLAVOUR_BACKENDS[flavour]) and pins.get(dist) == version:
            return Known(dist, (version,), change.on_the_images, IMAGES_EVIDENCE)
    return next((k for k in change.known if k.distribution == dist and version in k.versions), None)


def installed(distribution: str) -> str | None:
    """The version installed here, without a local build tag (torch's "+cu126": the same source)."""
    try:
        return metadata.version(distribution).split("+")[0]
    except metadata.PackageNotFoundError:
        return None


def off_reason(change: LibraryChange, options: WorkerOptions, env: Mapping[str, str]) -> str | None:
    """Why a worker with `options` does not make `change` (its off switch, in the front end's words), or None."""
    if change.kind == PATCH and not options.library_patches:
        return f"off ({setting(PATCHES_OFF, env)})"
    if change.kind == DEFAULT and options.is_off(change.default):   # a default has its own switch, not the patches'
        return f"off ({setting(option_setting('defaults_off', change.default), env)})"
    return None


# -- what a change does here, for real --------------------------------------------------------------------------

def resolve(target: str) -> object:
    """The object a target's first dotted name names ("torch.Tensor.item, ..." -> torch.Tensor.item), imported;
    TargetChanged when it is not there."""
    path = target.split()[0].rstrip(",")
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(found, name):
                raise TargetChanged(f"{path} is not there")
            found = getattr(found, name)
        return found
    raise TargetChanged(f"no module of {path} can be imported")


def check(change: LibraryChange) -> tuple[str, str]:
    """(status, reason) of making `change` in this process, for real: a patch is applied (so this process is only
    fit for checking), anything else has its target looked up."""
    if installed(change.distribution) is None:
        return NOT_INSTALLED, ""
    try:
        module = importlib.import_module(change.module)
    except ImportError as e:
        return NOT_NEEDED, f"this version has no {change.module} ({e})"
    try:
        if change.kind == PATCH:
            change.apply(module)
        else:
            resolve(change.target)
    except NotNeeded as e:
        return NOT_NEEDED, str(e)
    except TargetChanged as e:
        return REFUSED, str(e)
    except Exception as e:  # noqa: BLE001  (what a worker would meet: the change is not made)
        return REFUSED, f"{type(e).__name__}: {e}"
    return APPLIES, ""


def check_in_a_child(names: list[str], timeout: float = CHECK_TIMEOUT) -> dict[str, tuple[str, str]]:
    """check() for each change named, in a child process that makes them and ends (this one stays as it was)."""
    try:
        done = subprocess.run([sys.executable, "-m", "opentc_launcher.library_changes", "--check", "--json", *names],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        return {name: ("not checked", f"{type(e).__name__}: {e}") for name in names}
    if not isinstance(found, dict):
        said = (done.stderr.strip().splitlines() or ["no word"])[-1][:200]
        return dict.fromkeys(names, ("not checked", f"the check ended with exit code {done.returncode}: {said}"))
    return {name: (str(found[name][0]), str(found[name][1])) if name in found else ("not checked", "no answer")
            for name in names}


# -- what a job would get ------------------------------------------------------------------------------------------

def listing(options: WorkerOptions, env: Mapping[str, str], moves: Mapping[str, str] | None = None,
            moved_by: str = "requirements.txt",
            checked: Callable[[list[str]], dict[str, tuple[str, str]]] = check_in_a_child) -> list[str]:
    """The ledger as a worker with `options` would meet it, a line per change: what it is, and whether it applies,
    is not needed, would fail its guard, or is off. `moves`: the versions `moved_by` would install instead of those
    installed here (a distribution -> a version, or the requirement as written where it names no one version).
    Versions installed here that the ledger does not know are `checked` for real (in a child process)."""
    moves = moves or {}
    rows: list[tuple[LibraryChange, str]] = []
    unknown: list[str] = []
    for change in for_backend(options.backend):
        dist = change.distribution
        off = off_reason(change, options, env)
        version = moves.get(dist) or installed(dist)
        known = known_status(change, version) if version else None
        if off:
            status = off
        elif version is None:
            status = NOT_INSTALLED
        elif known is not None:
            status = f"{known.status} ({dist} {version}: {known.evidence})"
        elif dist in moves:
            shown = f"{dist} {version}" if version[:1].isdigit() else version
            status = f"not known for {shown} ({moved_by}): its guard decides when the job starts"
        else:
            status = ""
            unknown.append(change.name)
        rows.append((change, status))
    found = checked(unknown) if unknown else {}
    lines = []
    for change, status in rows:
        if not status:
            said, reason = found.get(change.name, ("not checked", ""))
            status = (f"{said}{': ' + reason if reason else ''} (checked now: {change.distribution} "
                      f"{installed(change.distribution)} is not a version the ledger knows)")
        stays = " (stays with the patches off)" if change.kind in (LAUNCH, OBSERVER, DEFAULT) else ""
        lines.append(f"{change.kind} {change.name} ({change.target}): {status}{stays}")
    return lines


def patches_off_line(options: WorkerOptions, env: Mapping[str, str]) -> str:
    """What a worker with the patches off still changes, by name (what it then runs as installed is the rest)."""
    kept = [c for c in for_backend(options.backend) if c.kind in (LAUNCH, OBSERVER, DEFAULT)]
    observers = ", ".join(c.name for c in kept if c.kind == OBSERVER)
    launch = ", ".join(c.name for c in kept if c.kind == LAUNCH)
    defaults = sorted({c.default for c in kept if c.kind == DEFAULT})
    return (f"library patches off ({setting(PATCHES_OFF, env)}): the libraries run as installed, but for what only "
            f"observes ({observers}: counts, times and findings, never a result)"
            + (f", the launch's own ({launch})" if launch else "")
            + (f" and the compile-time defaults ({', '.join(defaults)}), which "
               f"{setting(DEFAULTS_OFF, env)} turns off" if defaults else ""))


# -- the command line ------------------------------------------------------------------------------------------

def describe(change: LibraryChange) -> str:
    known = [f"{change.on_the_images} on the images' {change.distribution}"] + [
        f"{k.status} on {k.distribution} {', '.join(k.versions)} ({k.evidence})" for k in change.known]
    where = f"backend {change.backend}" if change.backend else "every backend"
    return (f"{change.kind} {change.name}: {change.target} ({where}, when {change.module} is imported)\n"
            f"    {change.why}\n    off: {change.off_switch(PATCHES_OFF.words, DEFAULTS_OFF.words)}; "
            f"known: {'; '.join(known)}")


TABLE_START, TABLE_END = "<!-- the ledger: library_changes --table -->", "<!-- end of the ledger -->"


def table_rows() -> list[str]:
    """The ledger as a markdown table (docs/versions.md, "Library changes")."""
    rows = ["| change | kind | target | backends | what it does | off | on the images' versions; elsewhere |",
            "|---|---|---|---|---|---|---|"]
    for c in ledger():
        known = "; ".join(f"{k.status} on {k.distribution} {', '.join(k.versions)} ({k.evidence})" for k in c.known)
        rows.append(f"| `{c.name}` | {c.kind} | `{c.target.split()[0].rstrip(',')}` | {c.backend or 'every'} | "
                    f"{c.why} | {c.off_switch('`library_patches` false', '`defaults_off`')} | "
                    f"{c.on_the_images}{'; ' + known if known else ''} |")
    return rows


def with_table(page: str) -> str:
    """`page` with the ledger's table between its markers rewritten."""
    head, rest = page.split(TABLE_START, 1)
    return "\n".join([head + TABLE_START, *table_rows(), TABLE_END + rest.split(TABLE_END, 1)[1]])


def verify() -> list[str]:
    """Each change whose backend this environment has, made here for real against what the ledger says of the
    installed version: the disagreements (a version the ledger does not know is one)."""
    problems = []
    for change in ledger():
        if change.backend and backend_named(change.backend).missing():
            continue
        status, reason = check(change)
        version = installed(change.distribution)
        if status == NOT_INSTALLED or version is None:
            problems.append(f"{change.name}: {change.distribution} is not installed here")
            continue
        known = known_status(change, version)
        if known is None:
            problems.append(f"{change.name}: the ledger does not know {change.distribution} {version}, where it "
                            f"{status}{': ' + reason if reason else ''}")
        elif known.status != status:
            problems.append(f"{change.name}: {status}{': ' + reason if reason else ''} on {change.distribution} "
                            f"{version}, where the ledger says {known.status}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opentc_launcher.library_changes", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="make each change here and say what happened")
    parser.add_argument("--verify", action="store_true", help="exit 1 where a change does not do what the ledger "
                                                              "says on the versions installed")
    parser.add_argument("--json", action="store_true", help="with --check: one line of JSON")
    parser.add_argument("--table", metavar="PAGE", help="rewrite the ledger's table in PAGE (docs/versions.md)")
    parser.add_argument("names", nargs="*", help="with --check: the changes to make (default: all)")
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table, encoding="utf-8") as f:
            page = f.read()
        with open(args.table, "w", encoding="utf-8") as f:
            f.write(with_table(page))
        return 0
    if args.verify:
        problems = verify()
        for problem in problems:
            print(problem)
        print(f"{len(ledger())} library changes; {len(problems)} do not do what the ledger says here")
        return 1 if problems else 0
    if args.check:
        by_name = {c.name: c for c in ledger()}
        chosen = [by_name[name] for name in args.names if name in by_name] if args.names else list(by_name.values())
        found = {change.name: check(change) for change in chosen}
        print(json.dumps(found) if args.json else "\n".join(f"{n}: {s}{': ' + r if r else ''}"
                                                             for n, (s, r) in found.items()))
        return 0
    print("\n".join(describe(change) for change in ledger()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

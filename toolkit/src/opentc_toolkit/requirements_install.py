"""requirements.txt beside the script, installed before the script runs, as SageMaker does, and judged by what it
does to the image rather than by its lines:

1. read as pip reads it (requirements_file.py): a file that is not of its encoding, or that asks for a package of the
   tested stack (torch, torch-xla, the CUDA libraries) at another version, however written, is bad input (exit 2)
   before pip runs;
2. what pip would install is pip's own answer, a dry run of the file as given under the stack's pins (`pip install
   --dry-run --report`): when it moves a package of the Hugging Face family, the rest of the family is resolved again
   with it (hf_stack.py), and the log (and `train --dry-run`) says what moves ("transformers 5.20.2 -> 4.57.6");
3. the install, under the supervisor (a stop reaches pip) and with pip's temporary files in the job's scratch folder
   (removed with it, a stop included), is judged: `pip check` against a check before it (what was broken before is
   the image's, said as such, and fails nothing), then the family imported in a child. A failed install is undone
   (package_backup.py: the job's environment as it was) and the job ends before its script (exit 1).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from opentc_launcher.api import exit_codes

from . import hf_stack, package_backup
from .not_started import BadInput, RequirementsFailed
from .outcome import last_lines
from .requirements_file import Entry, Reading, read_requirements
from .stack import constraints_text, stack_pins
from .supervisor import Command, JobStopped, ProcessResult, Supervisor

log = logging.getLogger(__name__)

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
PIP = (sys.executable, "-m", "pip")
MOST_LISTED = 12   # packages named in a line of the log; the rest are counted

# pip's WARNING when it cannot reach an index: "Retrying (Retry(...)) after connection broken by '<the cause>': <url>".
# Its ERROR lines then only say "No matching distribution found", which reads like a typo in a package name.
_CONNECTION_BROKEN = re.compile(r"after connection broken by '(?P<cause>.+)': (?P<where>\S+)\s*$")
# pip's words when a package had to be built from source and the build failed.
_BUILD_FAILED = re.compile(r"Failed building wheel for (?P<name>[\w.-]+)"
                           r"|^\W*(?:\u2570\u2500>|->) (?P<listed>[\w.-]+)\s*$")

# Run in a child after an install that moved the family: each import named on its command line ("module" or
# "module:attribute"), every failure written as JSON to the file named first.
IMPORT_CHECK = """
import importlib, json, sys
failed = []
for what in sys.argv[2:]:
    module, _, attribute = what.partition(":")
    try:
        imported = importlib.import_module(module)
        if attribute:
            getattr(imported, attribute)
    except Exception as e:
        failed.append([what, f"{type(e).__name__}: {e}"])
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(failed, f)
"""


def requirements_path(code: str, name: str = "requirements.txt") -> str | None:
    """requirements.txt in the code folder (whatever is there under that name: check_requirements says what is
    wrong with anything but a readable file), or None where there is nothing."""
    path = os.path.join(code, name)
    return path if os.path.lexists(path) else None


def conflicts(entries: Iterable[Entry], pins: Mapping[str, str]) -> list[str]:
    """The requirements and constraints that ask for a stack package at a version other than the pinned one, in the
    user's words and where they are."""
    return [f"{entry.words!r} ({entry.where}; this image pins {name}=={pins[name]})"
            for entry in entries if (name := entry.name) is not None and name in pins and not entry.accepts(pins[name])]


def check_requirements(path: str, name: str, pins: Mapping[str, str], env: Mapping[str, str]) -> Reading:
    """The requirements file as pip reads it with the environment `env`; BadInput for one pip cannot read as it
    stands (requirements_file.read_requirements), or that would move a package of the tested stack (`pins`)."""
    reading = read_requirements(path, name, env)
    clashes = conflicts(reading.entries, pins)
    if clashes:
        raise BadInput(
            f"{name} asks for {', '.join(clashes)}. torch, torch-xla, the XLA:CUDA plugin and the CUDA libraries are "
            f"installed as one tested set and cannot be changed by {name} (or a file it includes, or a constraint): "
            f"remove the requirement or pin the pinned version (the set is in /opt/opentc/constraints.txt).")
    return reading


def pip_environment(env: Mapping[str, str], scratch: str) -> dict[str, str]:
    """The job's environment for pip, with its temporary files (pip-build-tracker-*, pip-install-*) in the scratch
    folder, which the job removes whatever happens: pip leaves them behind when it is stopped."""
    temporary = os.path.join(scratch, "pip-tmp")
    os.makedirs(temporary, exist_ok=True)
    return {**env, "TMPDIR": temporary}


@dataclass(frozen=True)
class Change:
    name: str
    before: str | None   # None: not installed before
    after: str

    def __str__(self) -> str:
        return f"{self.name} {self.before} -> {self.after}" if self.before else f"{self.name} {self.after} (new)"


def changes(would_install: Mapping[str, str], installed: Callable[[str], str | None]) -> tuple[Change, ...]:
    """What an install of `would_install` ({name: version}, a pip report's) changes, the Hugging Face family first."""
    found = [Change(name, installed(name), version) for name, version in would_install.items()]
    return tuple(sorted(found, key=lambda c: (c.name not in hf_stack.FAMILY, c.name)))


def described(found: tuple[Change, ...] | list[Change]) -> str:
    shown = ", ".join(str(c) for c in found[:MOST_LISTED])
    return shown + (f" and {len(found) - MOST_LISTED} more" if len(found) > MOST_LISTED else "")


RunPip = Callable[[tuple[str, ...], str], None]   # (pip's argv, what it is doing), raising RequirementsFailed


@dataclass(frozen=True)
class Resolution:
    """How a requirements file is installed, as pip's dry runs decided it."""

    install: tuple[str, ...]          # pip's argv
    changes: tuple[Change, ...]       # what it installs
    moves_family: tuple[Change, ...]  # of them, the family packages the image had at another version
    companions: tuple[str, ...]       # the image's family packages resolved again with them
    notes: tuple[str, ...]            # why, for the log


def resolve(requirements: str, name: str, reading: Reading, pins: Mapping[str, str], family: Mapping[str, str],
            scratch: str, run: RunPip) -> Resolution:
    """pip's dry run of the file as given, under the stack's pins; when what it would install moves a package of the
    family (`family`: as installed), a second with the rest of the family unpinned beside it, and the bounds of
    hf_stack.RULES for the transformers it chose."""
    constraints = os.path.join(scratch, "stack-constraints.txt")
    with open(constraints, "w", encoding="utf-8") as f:
        f.write(constraints_text(pins))
    install = (*PIP, "install", "--no-input", "-r", requirements)
    held = ("-c", constraints)
    report = os.path.join(scratch, "pip-resolution.json")

    def dry_run(argv: tuple[str, ...], doing: str) -> dict[str, str]:
        return hf_stack.reported(dry_run_report(argv, doing))

    def dry_run_report(argv: tuple[str, ...], doing: str) -> str:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(report)
        run((*argv, "--dry-run", "--quiet", "--report", report), doing)
        try:
            with open(report, encoding="utf-8") as f:
                return f.read()
        except OSError:
            return ""

    first = changes(dry_run((*install, *held), "resolving it"), package_backup.installed_version)
    moves = tuple(c for c in first if c.name in family and c.before)
    if not moves:
        return Resolution((*install, *held), first, (), (), ())
    asked = reading.pinning(set(hf_stack.FAMILY))
    why = (f"{name} asks for {', '.join(e.words for e in asked)}" if asked else
           f"what {name} asks for moves {described(moves)}")
    companions = tuple(hf_stack.companions(reading.named(), family))
    if reading.hashes:
        return _resolved_with_hashes(install, held, first, moves, why, reading, companions, family, scratch,
                                     dry_run_report)
    notes: tuple[str, ...] = (f"{why}: the image's {', '.join(companions) or 'Hugging Face packages'} are resolved "
                              f"again with it (not pinned), so that they go together",)
    bounds: tuple[str, ...] = ()
    extra: tuple[str, ...] = companions
    would = dry_run((*install, *extra, *held), "resolving it with the image's Hugging Face packages")
    transformers = would.get("transformers", family.get("transformers"))
    rules = hf_stack.rules_for(transformers)
    if rules:
        path = os.path.join(scratch, "transformers-line-constraints.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(f"{c}\n" for rule in rules for c in rule.constraints))
        bounds = ("-c", path)
        notes += tuple(f"transformers {transformers}: {', '.join(rule.constraints)}, since {rule.why}"
                       for rule in rules)
        would = dry_run((*install, *extra, *bounds, *held),
                        f"resolving it with the bounds for transformers {transformers}")
    found_changes = changes(would, package_backup.installed_version)
    return Resolution((*install, *extra, *bounds, *held), found_changes,
                      tuple(c for c in found_changes if c.name in family and c.before), companions, notes)


def _resolved_with_hashes(install: tuple[str, ...], held: tuple[str, ...], first: tuple[Change, ...],
                          moves: tuple[Change, ...], why: str, reading: Reading, companions: tuple[str, ...],
                          family: Mapping[str, str], scratch: str,
                          dry_run_report: Callable[[tuple[str, ...], str], str]) -> Resolution:
    """A family move in hash-checking mode, where every package pip installs must be pinned with its hash: the
    family is resolved with the file's requirements read without their hashes, and what that adds is installed
    pinned with the hashes pip's report gives (a file of them beside the user's)."""
    user_constraints = os.path.join(scratch, "user-constraints.txt")
    with open(user_constraints, "w", encoding="utf-8") as f:
        f.write("".join(f"{e.words}\n" for e in reading.entries if e.constraint))
    unhashed = (*PIP, "install", "--no-input", *reading.as_arguments(), "-c", user_constraints)
    found = dry_run_report((*unhashed, *companions, *held), "resolving it with the image's Hugging Face packages")
    would, digests = hf_stack.reported(found), hf_stack.reported_hashes(found)
    added = {n: would[n] for n in sorted(would) if n not in reading.named()}
    unhashed_names = [n for n in added if n not in digests]
    if unhashed_names:
        return Resolution((*install, *held), first, moves, (), (
            f"{why}; in hash-checking mode (--hash) the image's other Hugging Face packages cannot be resolved again "
            f"with it, since pip gives no hash for {', '.join(unhashed_names)}: pip check and an import of the "
            f"family judge what it leaves",))
    pinned = os.path.join(scratch, "family-pinned.txt")
    with open(pinned, "w", encoding="utf-8") as f:
        f.write("".join(f"{n}=={v} --hash=sha256:{digests[n]}\n" for n, v in added.items()))
    found_changes = changes(would, package_backup.installed_version)
    return Resolution((*install, "-r", pinned, *held), found_changes,
                      tuple(c for c in found_changes if c.name in family and c.before), companions, (
                          f"{why}: the image's {', '.join(companions) or 'Hugging Face packages'} are resolved "
                          f"again with it (not pinned), so that they go together",
                          f"in hash-checking mode (--hash), what that adds is pinned with the hashes of pip's own "
                          f"resolution: {', '.join(f'{n}=={v}' for n, v in added.items()) or 'nothing'}"))


def _build_failures(lines: list[str]) -> list[str]:
    names = [m["name"] or m["listed"] for m in map(_BUILD_FAILED.search, lines) if m]
    return list(dict.fromkeys(names))


def _pip_reason(stderr: str) -> str:
    """pip's own account of a failure: the network cause first when pip could not reach an index, what had to be
    built from source when a build failed, then its ERROR lines (and what follows them), else its last lines."""
    lines = stderr.strip().splitlines()
    first_error = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), None)
    reason = "\n".join(lines[first_error:]) if first_error is not None else last_lines(stderr)
    built = _build_failures(lines)
    if built:
        era = (" transformers 4.11 to 4.15 and 4.18 to 4.22 need a tokenizers older than 0.13, which has no wheel "
               f"for Python {PYTHON} (it builds only with Rust and the network): pin transformers 4.23 or later "
               "(benchmarks/RESULTS.md lists the lines that train), or leave tokenizers unpinned." if "tokenizers"
               in built else "")
        reason = (f"{', '.join(built)} had to be built from source, since no release the requirements allow has a "
                  f"wheel for this image's Python {PYTHON}, and the build failed.{era} Ask for versions with a "
                  f"wheel for Python {PYTHON} (pypi.org lists each release's files).\n{reason}")
    broken = next((m for m in map(_CONNECTION_BROKEN.search, reversed(lines)) if m), None)
    if broken is not None:
        reason = (f"the package index could not be reached ({broken['where']}): {broken['cause']}. Check the "
                  f"network, the proxy (HTTPS_PROXY) or the index (PIP_INDEX_URL), or bake the packages into the "
                  f"image.\n{reason}")
    return reason


def failed_pip(name: str, code: str, doing: str, exit_code: int, stderr: str) -> RequirementsFailed:
    return RequirementsFailed(f"{name} in {code} could not be installed ({doing}: pip ended with exit code "
                              f"{exit_code}):\n{_pip_reason(stderr)}")


class _Installer:
    """pip and its checks under the supervisor, for one requirements file: a stop ends the job (JobStopped), a
    failure ends it before the script (RequirementsFailed)."""

    def __init__(self, supervisor: Supervisor, env: Mapping[str, str], code: str, name: str, scratch: str) -> None:
        self.supervisor, self.env, self.code, self.name, self.scratch = supervisor, env, code, name, scratch

    def run(self, argv: tuple[str, ...], on_line: Callable[[str], None] | None = None,
            cwd: str | None = None) -> ProcessResult:
        result = self.supervisor.run(Command(argv=argv, env=self.env, cwd=cwd or self.code), on_line=on_line)
        if result.stopped_by is not None:
            raise JobStopped(result, "pip", f"while {self.name} was being installed")
        return result

    def pip(self, argv: tuple[str, ...], doing: str) -> None:
        result = self.run(argv)
        if result.exit_code != exit_codes.OK:
            raise failed_pip(self.name, self.code, doing, result.exit_code, result.stderr_tail)

    def broken(self) -> list[str]:
        """What `pip check` finds broken in the environment now."""
        said: list[str] = []
        result = self.run((*PIP, "check"), on_line=said.append)
        return hf_stack.check_failures("\n".join(said)) if result.exit_code != exit_codes.OK else []

    def failed_imports(self, wanted: list[str]) -> list[tuple[str, str]]:
        """The imports of `wanted` that fail in a fresh Python, with why; run from the scratch folder, where no file
        of the user's can stand in for a package."""
        answer = os.path.join(self.scratch, "imports.json")
        result = self.run((sys.executable, "-c", IMPORT_CHECK, answer, *wanted), cwd=self.scratch)
        try:
            with open(answer, encoding="utf-8") as f:
                return [(str(what), str(error)) for what, error in json.load(f)]
        except (OSError, ValueError):
            return [(" and ".join(wanted), f"the check ended with exit code {result.exit_code} before it could say "
                                           f"(a crash in a native library: {last_lines(result.stderr_tail, 300)})")]

    def undo(self, backup: package_backup.Backup) -> str:
        """The packages the install changed uninstalled and the kept ones put back; in words, for the failure."""
        changed = backup.changed()
        if changed:
            self.run((*PIP, "uninstall", "--no-input", "--yes", *changed))
        backup.put_back()
        importlib.invalidate_caches()
        left = backup.changed()
        if left or backup.missing:
            return (f"What it changed could not all be put back ({', '.join(left + list(backup.missing))}: no record "
                    f"of their files): this container's packages are no longer the image's.")
        return (f"What it changed was put back as it was ({', '.join(changed)})." if changed else
                "It changed nothing.")


def install_requirements(code: str, supervisor: Supervisor, env: Mapping[str, str], scratch: str,
                         name: str = "requirements.txt") -> None:
    """requirements.txt beside the script, installed as this module's docstring says; returns when the script can
    run, raises RequirementsFailed (the environment as it was), BadInput or JobStopped."""
    requirements = requirements_path(code, name)
    if requirements is None:
        return
    pins = stack_pins()
    reading = check_requirements(requirements, name, pins, env)
    installer = _Installer(supervisor, pip_environment(env, scratch), code, name, scratch)
    family = hf_stack.installed_family()
    resolution = resolve(requirements, name, reading, pins, family, scratch, installer.pip)
    for note in resolution.notes:
        log.info("%s", note)
    if not resolution.changes:
        log.info("%s: pip installs nothing, everything it asks for is installed already", name)
        return
    log.info("installing %s (torch, torch-xla and the CUDA libraries held at the installed versions): %s",
             requirements, described(resolution.changes))
    broken_before = {*installer.broken(), *hf_stack.unmet_extras()}   # the image's own, held against no install
    backup = package_backup.keep([c.name for c in resolution.changes], os.path.join(scratch, "replaced-packages"))
    try:
        installer.pip(resolution.install, "installing it")
        _judge(installer, resolution, reading, family, broken_before)
    except RequirementsFailed as e:
        raise RequirementsFailed(f"{e}\n{installer.undo(backup)} The script did not run.") from None
    log.info("%s installed: %s", name, described(resolution.changes))


def this_install_broke(broken: list[str], broken_before: set[str]) -> tuple[list[str], list[str]]:
    """pip check's lines after an install, split into those it found before (the image's) and the install's own."""
    return [line for line in broken if line in broken_before], [line for line in broken if line not in broken_before]


def _judge(installer: _Installer, resolution: Resolution, reading: Reading, family: Mapping[str, str],
           broken_before: set[str]) -> None:
    """RequirementsFailed when the install broke what pip check judges, or the family no longer imports."""
    name, code = installer.name, installer.code
    inherited, new = this_install_broke(installer.broken(), broken_before)
    if inherited:
        log.warning("pip check: %s was already broken before %s was installed (the image's own packages, or an "
                    "earlier install's), so it is not held against %s:\n%s", "this" if len(inherited) == 1 else
                    "each of these", name, name, "\n".join(f"  {line}" for line in inherited[:20]))
    pins = reading.pinning(set(hf_stack.FAMILY))
    image = ", ".join(f"{k} {v}" for k, v in family.items())
    if new:
        moved = (f" It moved {described(resolution.moves_family)}, of the image's Hugging Face packages; pin the "
                 f"packages named above to versions that go with it, or drop the pin to use the image's ({image})."
                 if resolution.moves_family else " Pin the packages named above to versions that go together.")
        raise RequirementsFailed(f"{name} in {code} installed, but the packages it left do not work together (pip "
                                 f"check, against a check before it):\n" + "\n".join(f"  {line}" for line in new[:20])
                                 + "\n" + moved.strip())
    touched = {c.name for c in resolution.changes}
    now = hf_stack.installed_family()
    if not touched & hf_stack.dependencies(now):
        return
    unmet = [line for line in hf_stack.unmet_extras() if line not in broken_before]
    failed = [] if unmet else installer.failed_imports(hf_stack.imports(now))
    if not failed and not unmet:
        return
    alike: dict[str, list[str]] = {}   # the same error from several imports, said once
    for what, error in failed:
        alike.setdefault(first_line(error), []).append(_import_words(what))
    said = "\n".join([*(f"  {line}" for line in unmet),
                       *(f"  {', '.join(imports)}: {error}" for error, imports in alike.items())])
    change = (f"The pins to change: {', '.join(f'{e.words} ({e.where})' for e in pins)}. Pin the Hugging Face "
              f"packages together, at versions that work with each other, or remove those pins"
              if pins else "Pin the Hugging Face packages together, at versions that work with each other, or remove "
                           "what moves them")
    raise RequirementsFailed(
        f"{name} in {code} installed, but the Hugging Face packages it leaves do not work together (imported in a "
        f"fresh Python, after pip check passed):\n{said}\nIt moved {described(resolution.changes)}; package metadata "
        f"does not say everything a package needs. {change} to keep the image's ({image}).")


_MODULE_FILE = re.compile(r" \(/[^()]*\.py\)")   # "cannot import name 'x' from 'y' (/the/path/y/__init__.py)"


def first_line(text: str, limit: int = 300) -> str:
    """An error's first line, and its last when it has more (transformers' "Failed to import ... because of the
    following error" puts the cause last), without the file a module was read from: short, for SageMaker's 1,024
    characters of a failure."""
    lines = [_MODULE_FILE.sub("", line.strip()) for line in text.strip().splitlines() if line.strip()] or [""]
    return (lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}")[:limit]


def _import_words(what: str) -> str:
    module, _, attribute = what.partition(":")
    return f"from {module} import {attribute}" if attribute else f"import {module}"

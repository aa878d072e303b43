"""A requirements.txt that moves the Hugging Face stack: a Training Compiler user's scripts folder pins the transformers
of its day (4.21, 4.25, 4.38), and the image's transformers 5, datasets, huggingface-hub and accelerate do not work
with it.

pip alone gets this wrong: asked for `transformers==4.38.0` it downgrades huggingface-hub (transformers 4.x wants one
below 1.0), leaves the image's datasets (which wants 1.31 or later) broken beside it, reports the conflict and exits
0; and transformers 4.34 to 4.39 pass Accelerator() an argument accelerate 1.0 removed, which no package metadata
says. So when what pip would install (its dry run of the file as given, requirements_install.py) moves a package of
the family, however the file asks for it, the install becomes one resolution of the user's requirements with the rest
of the family the image holds, unpinned (pip then picks a datasets, an evaluate and an accelerate that go with the
user's transformers), torch and the CUDA stack held as always, and the bounds of RULES below for the transformers pip
chose. `pip check` then decides whether what was installed works together, and the family is imported in a child
(IMPORTS): metadata does not say everything (accelerate 0.30 declares nothing against transformers 5, whose Trainer
refuses it), so a stack that does not import is a failed install too, before the script, never a broken stack the
script meets.

RULES is a table tested line by line (benchmarks/transformers_lines.py, its results in benchmarks/RESULTS.md):
each transformers minor line from 4.11 to 4.57, installed as this module installs it, trains a Trainer step.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from .stack import canonical

# The image's Hugging Face packages that move together: a requirement that moves one re-resolves the others.
FAMILY = ("transformers", "accelerate", "datasets", "huggingface-hub", "tokenizers", "evaluate", "safetensors")


@dataclass(frozen=True)
class Rule:
    """What a line of transformers needs beyond what its metadata says: `constraints` for pip, and why."""

    transformers: str               # a version specifier on transformers
    constraints: tuple[str, ...]
    why: str


RULES: tuple[Rule, ...] = (
    Rule("==4.34.*", ("accelerate<0.32",),
         "it needs tokenizers 0.14, which needs a huggingface-hub below 0.18, and accelerate from 0.32 imports what "
         "only a later hub has (split_torch_state_dict_into_shards) while declaring no bound on it"),
)


def installed_family() -> dict[str, str]:
    """{canonical name: version} of the family packages installed here."""
    found = {}
    for name in FAMILY:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def companions(named: set[str], installed: Mapping[str, str]) -> list[str]:
    """The installed family packages the requirements do not name (`named`: canonical names): re-resolved with them,
    unpinned."""
    return [name for name in installed if name not in named]


def dependencies(names: Iterable[str]) -> set[str]:
    """`names` and every installed package they need, as installed (their unconditional requirements, and those whose
    markers hold here without an extra), canonical: what an install must not move for them to keep importing as
    they did."""
    from packaging.requirements import InvalidRequirement, Requirement

    found: set[str] = set()
    waiting = [canonical(n) for n in names]
    while waiting:
        name = waiting.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                waiting.append(canonical(requirement.name))
    return found


# What a Hugging Face script imports first, each in a child after an install that moved any of them or what they
# need: "module" or "module:attribute" (the Trainer is transformers' lazy attribute, which imports accelerate).
IMPORTS = {"transformers": ("transformers", "transformers:Trainer"), "accelerate": ("accelerate",),
           "datasets": ("datasets",)}


# What a Trainer script needs beyond what pip check judges: the extras it is installed with (`pip install
# transformers[torch]`), whose requirements pip check never reads. transformers 5 refuses an accelerate below 1.1
# when the Trainer's arguments are made, with nothing in the metadata pip checks.
EXTRAS = {"transformers": "torch"}


def unmet_extras() -> list[str]:
    """The requirements of EXTRAS that the installed packages do not meet, in words."""
    from packaging.requirements import InvalidRequirement, Requirement

    found = []
    for name, extra in EXTRAS.items():
        try:
            version, requires = metadata.version(name), metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            marker = requirement.marker
            if marker is None or marker.evaluate({"extra": ""}) or not marker.evaluate({"extra": extra}):
                continue   # not the extra's own: pip check judges it
            try:
                have = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                continue   # an optional part of the extra the image never had
            if not requirement.specifier.contains(have, prereleases=True):
                found.append(f"{name} {version} needs {requirement.name}{requirement.specifier} for its Trainer "
                             f"({name}[{extra}]), but {requirement.name} {have} is installed")
    return found


def imports(installed: Mapping[str, str]) -> list[str]:
    """The imports that must work after an install, for the family packages installed (`installed`)."""
    return [what for name, each in IMPORTS.items() if name in installed for what in each]


def rules_for(transformers_version: str | None) -> list[Rule]:
    if not transformers_version:
        return []
    try:
        version = Version(transformers_version)
    except InvalidVersion:
        return []
    return [rule for rule in RULES if SpecifierSet(rule.transformers).contains(version, prereleases=True)]


def chosen(report_text: str, name: str, installed: Mapping[str, str]) -> str | None:
    """The version of `name` a pip dry run's report (`pip install --dry-run --report`) would install, else the one
    installed already."""
    return reported(report_text).get(name, installed.get(name))


def reported(report_text: str) -> dict[str, str]:
    """{canonical name: version} of what a pip dry run's report would install ({} for a report that is not one)."""
    return {name: version for name, (version, _) in _items(report_text).items()}


def reported_hashes(report_text: str) -> dict[str, str]:
    """{canonical name: sha256} of what a pip dry run's report would install, where the report gives one."""
    return {name: digest for name, (_, digest) in _items(report_text).items() if digest}


def _items(report_text: str) -> dict[str, tuple[str, str]]:
    try:
        report = json.loads(report_text)
    except ValueError:
        return {}
    found = {}
    for item in (report.get("install") or []) if isinstance(report, dict) else []:
        if not isinstance(item, dict):
            continue
        data = item.get("metadata") or {}
        archive = (item.get("download_info") or {}).get("archive_info") or {}
        if data.get("name") and data.get("version"):
            found[canonical(str(data["name"]))] = (str(data["version"]), str((archive.get("hashes") or {}).get(
                "sha256") or ""))
    return found


def check_failures(pip_check_output: str) -> list[str]:
    """pip check's lines that name a broken requirement ("X 1.0 has requirement Y>=2, but you have Y 1.5.")."""
    return [line.strip() for line in pip_check_output.splitlines()
            if line.strip() and not line.startswith("No broken requirements")]

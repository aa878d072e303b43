"""A requirements.txt that moves the Hugging Face stack: a Training Compiler user's scripts folder pins the transformers
of its day (4.21, 4.25, 4.38), and the image's transformers 5, datasets, huggingface-hub and accelerate do not work
with it.

pip alone gets this wrong: asked for `transformers==4.38.0` it downgrades huggingface-hub (transformers 4.x wants one
below 1.0), leaves the image's datasets (which wants 1.31 or later) broken beside it, reports the conflict and exits
0; and transformers 4.34 to 4.39 pass Accelerator() an argument accelerate 1.0 removed, which no package metadata
says. So when a requirement moves a package of the family, the install becomes one resolution of the user's
requirements with the rest of the family the image holds, unpinned (pip then picks a datasets, an evaluate and an
accelerate that go with the user's transformers), torch and the CUDA stack held as always, and the bounds of RULES
below for the transformers pip chose (a dry run finds it first). `pip check` then decides whether what was installed
works together: a conflict pip reported and installed anyway is a failed install, never a silent broken stack.

RULES is a table tested line by line (benchmarks/transformers_lines.py, its results in benchmarks/RESULTS.md):
each transformers minor line from 4.11 to 4.57, installed as this module installs it, trains a Trainer step.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
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


def requirements_of(lines: Iterable[str]) -> list[Requirement]:
    """The requirements a requirements file names by package (options, paths and URLs are pip's own business)."""
    found = []
    for line in lines:
        text = line.split(" #", 1)[0].strip()
        if not text or text.startswith(("#", "-")):
            continue
        try:
            found.append(Requirement(text))
        except InvalidRequirement:
            continue
    return found


def moved(lines: Iterable[str], installed: Mapping[str, str]) -> list[str]:
    """The requirements, in the user's words, that ask for a family package at a version other than the installed
    one (`installed`: {canonical name: version} of the family)."""
    found = []
    for requirement in requirements_of(lines):
        name = canonical(requirement.name)
        if name in installed and (requirement.url or not requirement.specifier.contains(installed[name],
                                                                                           prereleases=True)):
            found.append(str(requirement))
    return found


def companions(lines: Iterable[str], installed: Mapping[str, str]) -> list[str]:
    """The installed family packages the requirements do not name: re-resolved with them, unpinned."""
    named = {canonical(r.name) for r in requirements_of(lines)}
    return [name for name in installed if name not in named]


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
    try:
        report = json.loads(report_text)
    except ValueError:
        return installed.get(name)
    for item in report.get("install") or []:
        metadata = item.get("metadata") or {}
        if canonical(str(metadata.get("name", ""))) == name:
            return str(metadata.get("version"))
    return installed.get(name)


def check_failures(pip_check_output: str) -> list[str]:
    """pip check's lines that name a broken requirement ("X 1.0 has requirement Y>=2, but you have Y 1.5.")."""
    return [line.strip() for line in pip_check_output.splitlines()
            if line.strip() and not line.startswith("No broken requirements")]

"""The packages that must move together, pinned at the versions installed here: torch, torchvision (built against
one torch), torch-xla, the XLA:CUDA plugin and ptxas, triton, and torch's CUDA wheels (nvidia-*, and cuda-* since
torch 2.9: cuda-toolkit, cuda-bindings, cuda-pathfinder).

A user's requirements.txt is installed under these pins (transformers, datasets and the rest stay free to
upgrade), so an unpinned `torchaudio` cannot pull a newer torch and CUDA under torch-xla. The image writes
the same pins to /opt/opentc/stack-constraints.txt and points PIP_CONSTRAINT at it, so a derived image's own
`pip install` gets the same protection. `python -m opentc_toolkit.stack` prints them.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
from collections.abc import Iterable, Mapping

STACK = ("torch", "torch-xla", "jax-cuda12-pjrt", "triton", "torchvision")
STACK_PREFIXES = ("nvidia-", "cuda-")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def stack_pins() -> dict[str, str]:
    """{package: installed version} for every installed package of the stack."""
    pins = {}
    for dist in metadata.distributions():
        name = canonical(dist.metadata["Name"] or "")
        if name in STACK or name.startswith(STACK_PREFIXES):
            pins[name] = dist.version
    return dict(sorted(pins.items()))


def constraints_text(pins: Mapping[str, str]) -> str:
    return "".join(f"{name}=={version}\n" for name, version in pins.items())


def conflicts(requirement_lines: Iterable[str], pins: Mapping[str, str]) -> list[str]:
    """Requirements that ask for a stack package at a version other than the pinned one, in the user's words."""
    from packaging.requirements import InvalidRequirement, Requirement

    found = []
    for line in requirement_lines:
        text = line.split(" #", 1)[0].strip()
        if not text or text.startswith(("#", "-")):
            continue
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue   # pip's own reading applies (a path, a URL): pip will name any conflict
        name = canonical(requirement.name)
        if name not in pins:
            continue
        if requirement.url or not requirement.specifier.contains(pins[name], prereleases=True):
            found.append(f"{text!r} (this image pins {name}=={pins[name]})")
    return found


def requested_versions(requirement_lines: Iterable[str]) -> dict[str, str]:
    """What a requirements file asks of each package it names: the version, where it pins one (`==4.38.0`), else the
    requirement as written (`transformers>=4.30`: pip decides). Lines pip reads otherwise (paths, URLs, options) are
    left to pip."""
    from packaging.requirements import InvalidRequirement, Requirement

    asked = {}
    for line in requirement_lines:
        text = line.split(" #", 1)[0].strip()
        if not text or text.startswith(("#", "-")):
            continue
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        pinned = [s.version for s in requirement.specifier if s.operator in ("==", "===") and "*" not in s.version]
        asked[canonical(requirement.name)] = pinned[0] if len(pinned) == 1 and not requirement.url else text
    return asked


def main() -> None:
    print("# The packages that must move together, at the versions installed (opentc_toolkit.stack).")
    print(constraints_text(stack_pins()), end="")


if __name__ == "__main__":
    main()

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
from collections.abc import Mapping

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


def main() -> None:
    print("# The packages that must move together, at the versions installed (opentc_toolkit.stack).")
    print(constraints_text(stack_pins()), end="")


if __name__ == "__main__":
    main()

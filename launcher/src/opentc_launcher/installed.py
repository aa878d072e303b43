"""What this environment has installed, asked without importing it: which compiler an image ships as its default.

The xla image has PyTorch/XLA and defaults to it, as AWS's Training Compiler did; the inductor image has current
PyTorch without torch-xla and defaults to TorchInductor. Deciding by what is installed, never by an image's name or
tag, keeps a derived image (or a venv) right whatever it is called.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util


def version(distribution: str) -> str | None:
    """The installed version of a distribution (a pip package name), or None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def has_module(name: str) -> bool:
    """Whether `name` can be imported here (found, not imported: torch_xla takes seconds and starts a runtime)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):   # a finder that refuses it (a broken install, a blocked package)
        return False


def default_compiler() -> str:
    """xla where PyTorch/XLA is installed, else inductor."""
    return "xla" if has_module("torch_xla") else "inductor"


def why_default(name: str) -> str:
    """Why `name` is the default compiler here, for the log."""
    if name == "xla":
        return "PyTorch/XLA is installed here (the xla image), so XLA is the default, as in AWS's Training Compiler"
    return "this image has no PyTorch/XLA (torch-xla), so TorchInductor (torch.compile) is its compiler"

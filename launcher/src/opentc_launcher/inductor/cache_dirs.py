"""Where Inductor's cache is: the variable torch reads, and this torch's folder under a cache root. Shared by the
backend (inductor/__init__: the working copy) and the worker's session (inductor/session)."""

from __future__ import annotations

import importlib.metadata as metadata

from ..cache_folders import cache_folder

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"


def cache_folder_for(root: str, device: str) -> str:
    """This torch's Inductor cache folder under a cache root (cache_folders' policy)."""
    return cache_folder(root, "inductor-torch", metadata.version("torch"), device)

"""Putting a wrapper in place of a library's function, once: what the library patches, the spawned-process hook,
XLA's sync hook and the DataLoader watch all do."""

from __future__ import annotations

from collections.abc import Callable


def replace_once(owner: object, name: str, wrapper: Callable) -> None:
    """Put `wrapper` in place of owner.<name> (kept as wrapper.__wrapped__), unless a wrapper of ours is there
    already."""
    original = getattr(owner, name)
    if getattr(original, "__opentc_patch__", False):
        return
    wrapper.__opentc_patch__ = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original   # type: ignore[attr-defined]
    setattr(owner, name, wrapper)

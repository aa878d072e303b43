"""Putting a wrapper in place of a library's function, once: what the library patches, the spawned-process hook,
XLA's sync hook and the DataLoader watch all do."""

from __future__ import annotations

from collections.abc import Callable


def replace_once(owner: object, name: str, wrapper: Callable, key: str | None = None) -> None:
    """Put `wrapper` in place of owner.<name> (kept as wrapper.__wrapped__), unless the same patch (`key`: by default
    the wrapper's own qualified name) is there already. Another patch of ours there is wrapped in turn: two of them
    may need one function (the fp16 check and the era's Accelerator arguments both wrap Accelerator.__init__)."""
    original = getattr(owner, name)
    key = key or f"{getattr(wrapper, '__module__', '')}.{getattr(wrapper, '__qualname__', repr(wrapper))}"
    applied: frozenset[str] = getattr(original, "__opentc_patches__", frozenset())
    if key in applied:
        return
    wrapper.__opentc_patch__ = True  # type: ignore[attr-defined]
    wrapper.__opentc_patches__ = applied | {key}  # type: ignore[attr-defined]
    wrapper.__wrapped__ = original   # type: ignore[attr-defined]
    setattr(owner, name, wrapper)

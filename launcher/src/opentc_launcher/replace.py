"""The only ways the image changes another library's code, each made by a change of the ledger (patching.py,
library_changes.py): a wrapper put in place of a function, once (replace_once), or another value in place of an
attribute (set_once). tests/test_library_changes.py holds every call of these to a function the ledger names, and
finds any other change to a library's attributes."""

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


def set_once(owner: object, name: str, value: object) -> None:
    """Put `value` in place of owner.<name> (or add it), where the value cannot carry replace_once's marks (a
    staticmethod, a partial, a module's missing name, an object standing in for a method). The caller knows whether
    it is there already."""
    setattr(owner, name, value)

"""Which ModuleLists hold repeated blocks: the rule regional compilation (regional.py) decides by.

Compiled in place, each block of a list shares Dynamo's graph with the blocks of its kind (one class, the same
parameters and buffers by name, shape and dtype), so a list costs one graph per kind, whatever its depth. The
blocks of a list are repeated when:

- they are of one class, at least two of them;
- the members two kinds both have are alike: kinds differ only in members some blocks carry besides. T5's first
  block carries the relative position bias table (an Embedding) that the stack's other blocks reuse: two kinds of
  one layer. Blocks whose common members differ in shape (a pyramid's widths) are other layers, as the rule had
  it before kinds: compiled one by one they share a graph only where a width happens to repeat, and lose the
  fusion between them, so such a list is left to the whole model's compile;
- there are at most MAX_KINDS kinds, the most common covering at least half the blocks: most blocks share one
  graph (with two blocks, T5 at depth 2, each is one: no sharing, but still the blocks alone, without the whole
  model's glue), and the kinds stay well inside Dynamo's recompile limit: each kind is a new entry on the block
  class's forward, and past 8 (torch 2.7 to 2.14) the remaining blocks would run uncompiled. T5's encoder and
  decoder blocks are one class: 4 entries.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

MAX_KINDS = 3

Members = tuple[tuple[str, tuple[int, ...], Any], ...]   # (name, shape, dtype) of each parameter and buffer


def members(block: Any) -> Members:
    """A block's parameters and buffers by name, shape and dtype."""
    return tuple((name, tuple(t.shape), t.dtype) for name, t in [*block.named_parameters(),
                                                                  *block.named_buffers()])


def kinds(blocks: Any) -> Counter[tuple[type, Members]]:
    """How many blocks of each kind (class and members) a list holds."""
    return Counter((type(block), members(block)) for block in blocks)


def _members_alike(found: Counter[tuple[type, Members]]) -> bool:
    """Whether every member name has one shape and dtype in every kind that has it."""
    seen: dict[str, tuple[tuple[int, ...], Any]] = {}
    for _, kind_members in found:
        for name, shape, dtype in kind_members:
            if seen.setdefault(name, (shape, dtype)) != (shape, dtype):
                return False
    return True


def repeated_kinds(module: Any) -> int:
    """The number of kinds of block a ModuleList of repeated blocks holds (the rule above), else 0."""
    import torch

    if not isinstance(module, torch.nn.ModuleList) or len(module) < 2:
        return 0
    found = kinds(module)
    if len({cls for cls, _ in found}) != 1 or len(found) > MAX_KINDS or not _members_alike(found):
        return 0
    most_common = found.most_common(1)[0][1]
    return len(found) if 2 * most_common >= len(module) else 0

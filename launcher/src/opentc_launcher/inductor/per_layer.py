"""Recompilations that repeat once per layer, named from Dynamo's recompile reasons.

Regionally compiled blocks share one graph only when the block's code reads no per-layer Python value. When it
does (transformers' models read their layer's cache entry when `use_cache` is on), Dynamo guards on that value and
compiles the block again for every layer: the reasons then differ only by an index ("layers[0]", "layers[1]",
...). Past torch's recompile limit (8 by default) the remaining layers run uncompiled.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..compile_report import PER_LAYER_RECOMPILATION, Finding

_COMPILE_ID = re.compile(r"^\s*\d+/\d+:\s*")                 # "1/3: " before each reason
_INDEX = re.compile(r"\[\s*'?\d+'?\s*\]")                   # layers[3], _modules['3']
_CACHE_WORDS = ("cache", "is_initialized", "past_key_value", "layer_idx")
RECOMPILE_LIMIT = 8   # torch._dynamo.config.recompile_limit's default (torch 2.7 to 2.14)


def _first_line(reason: str) -> str:
    return _COMPILE_ID.sub("", reason.strip().splitlines()[0] if reason.strip() else "")


def per_layer_finding(recompilations: Sequence[dict[str, Any]], whole_model: str) -> Finding | None:
    """A finding when one function was recompiled for reasons that differ only by an index, else None.
    `recompilations`: {"function", "where", "reason"} as the session lists them; `whole_model`: how this job
    compiles the whole model instead, in words."""
    by_place: dict[tuple[str, str], list[str]] = {}
    for r in recompilations:
        by_place.setdefault((str(r.get("function")), str(r.get("where"))), []).append(_first_line(str(r["reason"])))
    for (function, where), reasons in by_place.items():
        shapes = {_INDEX.sub("[N]", reason) for reason in reasons}
        if len(shapes) != 1 or "[N]" not in next(iter(shapes)):
            continue
        about_a_cache = any(word in reason for reason in reasons for word in _CACHE_WORDS)
        # Two layers recompile once: one reason is enough when it is about a per-layer cache entry.
        if len(set(reasons)) < (1 if about_a_cache else 2):
            continue
        limit = (f"; past torch's recompile limit ({RECOMPILE_LIMIT}) the remaining layers run uncompiled"
                 if len(reasons) + 1 >= RECOMPILE_LIMIT else "")
        problem = (f"{function} ({where}) was compiled again for each layer ({len(reasons)} recompilations whose "
                   f"reasons differ only by an index, e.g. {reasons[0]!r}): each block reads a per-layer value, so "
                   f"the blocks share no graph{limit}.")
        if about_a_cache:
            fix = ("the model builds a per-layer cache in training: set model.config.use_cache = False before "
                   f"compiling or preparing it (the Trainer does this itself), or {whole_model}")
        else:
            fix = f"keep per-layer values (an index, a flag) out of the block's forward, or {whole_model}"
        return Finding(problem, fix, PER_LAYER_RECOMPILATION)
    return None

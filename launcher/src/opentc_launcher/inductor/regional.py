"""Regional compilation for Trainer and Accelerate jobs: each repeated block compiled once, the copies sharing it.

accelerate compiles regionally when ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION is true: Accelerator.prepare_model
calls its `compile_regions`, which compiles each block of a ModuleList of identical blocks (they share one graph,
so a 12-layer model compiles one block's graph instead of the whole model's). When the backend turned regional
compilation on, prepare_model calls `compile_blocks` below instead; a user who sets the variable gets accelerate's
own. It differs from accelerate's in three ways:

- In place. Each block is compiled with `Module.compile()`, as accelerate's own FSDP2 and DeepSpeed variants do:
  the model keeps its modules and their names. accelerate's `compile_regions` returns a copy whose children are
  compiled wrappers, and `accelerator.unwrap_model(model)` returns that copy: its state_dict names carry
  `_orig_mod.`, and `save_pretrained` fails on GPT-2's tied weights.
- A single layer (no sub-modules: the embeddings, the final norm, the output projection) stays eager. Compiled
  alone it has nothing to fuse with, and each one costs a forward and a backward graph. Other parts with parts
  of their own are compiled, each in place.
- A model that builds a per-layer cache in training (transformers' `config.use_cache`, true by default), or has
  no repeated blocks, is compiled whole, as accelerate does without the variable: with the cache each block reads
  its own layer's entry, so Dynamo would compile the block once per layer and, past its recompile limit (8), run
  the remaining layers uncompiled. The Trainer turns `use_cache` off itself; an Accelerate loop sets
  `model.config.use_cache = False` before `prepare`.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

log = logging.getLogger("opentc_launcher")

VARIABLE = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"
PER_LAYER_CACHE = ("compiled whole: model.config.use_cache is true, so each block would read its own layer's cache "
                   "entry and Dynamo would compile it once per layer; set model.config.use_cache = False before "
                   "accelerator.prepare to compile it regionally (the Trainer does this itself)")


def _wrapped(model: Any) -> Any:
    """The model inside DDP (or DataParallel): what holds the blocks."""
    inner = getattr(model, "module", None)
    return inner if inner is not None and hasattr(inner, "named_children") else model


def builds_per_layer_cache(model: Any) -> bool:
    """Whether a transformers model (or one wrapped by DDP) would build a per-layer cache in its forward pass: its
    config says use_cache."""
    config = getattr(_wrapped(model), "config", None)
    return config is not None and getattr(config, "use_cache", False) is True


def _is_repeated_blocks(module: Any) -> bool:
    import torch

    return (isinstance(module, torch.nn.ModuleList) and len(module) > 1
            and all(type(block) is type(module[0]) for block in module))


def _has_repeated_blocks(module: Any) -> bool:
    return any(_is_repeated_blocks(m) for m in module.modules())


def compile_in_place(module: Any, **compile_kwargs: Any) -> tuple[int, int, int]:
    """Compile, in place, each repeated block and each other part with parts of its own, leaving single layers
    eager. Returns (blocks, other parts, single layers left eager)."""
    blocks = parts = single = 0
    for child in module.children():
        if _is_repeated_blocks(child):
            for block in child:
                block.compile(**compile_kwargs)
            blocks += len(child)
        elif _has_repeated_blocks(child):
            more = compile_in_place(child, **compile_kwargs)
            blocks, parts, single = blocks + more[0], parts + more[1], single + more[2]
        elif next(child.children(), None) is not None:
            child.compile(**compile_kwargs)
            parts += 1
        else:
            single += 1
    return blocks, parts, single


def compile_blocks(model: Any, **compile_kwargs: Any) -> Any:
    """What Accelerator.prepare_model calls for regional compilation (the module's docstring): the model itself,
    compiled in place, or the whole model compiled (a new wrapper) where regional compilation cannot help."""
    import torch

    inner = _wrapped(model)
    if builds_per_layer_cache(model):
        log.info("regional compilation: %s", PER_LAYER_CACHE)
        return torch.compile(model, **compile_kwargs)
    if not _has_repeated_blocks(inner):
        log.info("regional compilation: compiled whole: the model has no repeated blocks")
        return torch.compile(model, **compile_kwargs)
    blocks, parts, single = compile_in_place(inner, **compile_kwargs)
    log.info("regional compilation: %d repeated blocks compiled in place, sharing one graph per kind of block; %d "
             "other part(s) compiled; %d single layer(s) left eager", blocks, parts, single)
    return model


def patch_accelerator(accelerator: ModuleType) -> bool:
    """Make Accelerator.prepare_model (accelerate.accelerator's own name compile_regions) call compile_blocks.
    False when this accelerate has no compile_regions there: its own regional compilation, if any, runs."""
    if not callable(getattr(accelerator, "compile_regions", None)):
        return False
    accelerator.compile_regions = compile_blocks  # type: ignore[attr-defined]
    return True

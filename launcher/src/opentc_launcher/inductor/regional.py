"""Regional compilation: each repeated block compiled once, the copies sharing it, for Trainer and Accelerate jobs and
for a plain script's torch.compile(model).

accelerate compiles regionally when ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION is true: Accelerator.prepare_model
calls its `compile_regions`, which compiles each block of a ModuleList of identical blocks (they share one graph,
so a 12-layer model compiles one block's graph instead of the whole model's). When the backend turned regional
compilation on, prepare_model calls `compile_blocks` below instead; a user who sets the variable gets accelerate's
own. A plain script's `torch.compile(model)` (a module with repeated blocks, not `fullgraph=True`) is handled the
same way (`patch_torch_compile`): the blocks are compiled in place, where torch would have compiled the whole model
as one graph at a cost growing with its depth, and the script gets the wrapper torch.compile returns.

(torch >= 2.12's `torch.compiler.nested_compile_region` would keep the model one graph and compile a block once; on
torch 2.14.1 with Inductor on CPU it gives wrong gradients instead: a marked residual block's differ from eager's by
1.0 relative, with or without dropout, and a 3-layer GPT-2's by 1.5e3 (benchmarks/RESULTS.md). It is not used
here; benchmarks/nested_region_probe.py checks a torch for it.)

It differs from accelerate's in three ways:

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
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..replace import replace_once

log = logging.getLogger("opentc_launcher")

VARIABLE = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"


def _wrapped(model: Any) -> Any:
    """The model inside DDP (or DataParallel): what holds the blocks."""
    inner = getattr(model, "module", None)
    return inner if inner is not None and hasattr(inner, "named_children") else model


def builds_per_layer_cache(model: Any) -> bool:
    """Whether a transformers model (or one wrapped by DDP) would build a per-layer cache in its forward pass: its
    config says use_cache."""
    config = getattr(_wrapped(model), "config", None)
    return config is not None and getattr(config, "use_cache", False) is True


def _shape(block: Any) -> list[tuple[str, tuple[int, ...], Any]]:
    """A block's parameters and buffers by name, shape and dtype: blocks that differ in them are not one region."""
    return [(name, tuple(t.shape), t.dtype) for name, t in [*block.named_parameters(), *block.named_buffers()]]


def _is_repeated_blocks(module: Any) -> bool:
    """A ModuleList of blocks of one class and one shape (a pyramid's blocks of several widths would recompile for
    each width and share nothing)."""
    import torch

    if not isinstance(module, torch.nn.ModuleList) or len(module) < 2:
        return False
    first, shape = type(module[0]), _shape(module[0])
    return all(type(block) is first and _shape(block) == shape for block in module)


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

    reason = _whole_reason(model, "accelerator.prepare to compile it regionally (the Trainer does this itself)")
    if reason is not None:
        log.info("regional compilation: %s", reason)
        return unpatched_compile(torch)(model, **compile_kwargs)
    inner = _wrapped(model)
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


def _whole_reason(model: Any, cache_off_before: str) -> str | None:
    """Why `model` is compiled whole rather than regionally (a per-layer cache, or no repeated blocks), in words that
    say where to turn the cache off (`cache_off_before`); None where its blocks can be compiled in place."""
    if builds_per_layer_cache(model):
        return ("compiled whole: model.config.use_cache is true, so each block would read its own layer's cache "
                f"entry and Dynamo would compile it once per layer; set model.config.use_cache = False before "
                f"{cache_off_before}")
    if not _has_repeated_blocks(_wrapped(model)):
        return "compiled whole: the model has no repeated blocks"
    return None


def why_whole(model: Any, compile_kwargs: dict[str, Any]) -> str | None:
    """None where a plain script's torch.compile(model, **compile_kwargs) is compiled regionally (a module with
    repeated blocks and no per-layer cache, not asked for one whole graph); otherwise why it is compiled whole."""
    if compile_kwargs.get("fullgraph"):
        return "compiled whole: fullgraph=True asks for one graph"
    return _whole_reason(model, "torch.compile to compile it regionally")


def unpatched_compile(torch_module: ModuleType) -> Any:
    """torch.compile as torch defines it, whether or not patch_torch_compile replaced it."""
    compile = torch_module.compile
    return compile.__wrapped__ if getattr(compile, "__opentc_patch__", False) else compile


def patch_torch_compile(torch_module: ModuleType, noted: Callable[[str], None]) -> None:
    """torch.compile(model) of a module with repeated blocks compiles them in place (why_whole) and returns what
    torch would have: a wrapper whose `_orig_mod` is the model (state_dict names with `_orig_mod.`, accelerate and
    transformers unwrap it), here one that compiles nothing more itself. Everything else (a function, a decorator,
    fullgraph=True, disable=True, a model compiled whole for a reason logged) goes to torch's own. `noted` receives
    what was done, for the compile report."""
    original = unpatched_compile(torch_module)

    def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if model is None or args or kwargs.get("disable") or not isinstance(model, torch_module.nn.Module):
            return original(model, *args, **kwargs)
        reason = why_whole(model, kwargs)
        if reason is not None:
            log.info("regional compilation: torch.compile(%s) %s", type(model).__name__, reason)
            return original(model, **kwargs)
        blocks, parts, single = compile_in_place(_wrapped(model), **kwargs)
        words = (f"torch.compile({type(model).__name__}) compiled its {blocks} repeated blocks in place, sharing one "
                 f"graph per kind of block, and {parts} other part(s); {single} single layer(s) left eager")
        log.info("regional compilation: %s", words)
        noted(words)
        return torch_module.compiler.disable(model)

    replace_once(torch_module, "compile", compile)

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

It differs from accelerate's in five ways:

- Which blocks. accelerate compiles the blocks of any ModuleList of one class, a pyramid's of many widths too; the
  backend only those repeated by repeated_blocks.py's rule: one class in a few kinds of one layer (T5's first
  block carries the position bias table the others reuse), one graph per kind.

- In place. Each block is compiled with `Module.compile()`, as accelerate's own FSDP2 and DeepSpeed variants do:
  the model keeps its modules and their names. accelerate's `compile_regions` returns a copy whose children are
  compiled wrappers, and `accelerator.unwrap_model(model)` returns that copy: its state_dict names carry
  `_orig_mod.`, and `save_pretrained` fails on GPT-2's tied weights.
- A single layer (no sub-modules: the embeddings, the final norm, the output projection) stays eager. Compiled
  alone it has nothing to fuse with, and each one costs a forward and a backward graph. Other parts with parts
  of their own are compiled, each in place.
- The head. Where the blocks live in a part of the model (its trunk: GPT-2's `transformer`, Llama's `model`, T5's
  encoder and decoder), what the model's own forward does around that part is compiled too, as one region: the
  output layer and the loss (`lm_head` and the cross-entropy, among a step's largest kernels with a 50k vocabulary),
  fused, where they would otherwise run op by op. The trunk's forward is put behind a boundary (region_boundary.py)
  where the compiled forward breaks and resumes, so the region costs one graph (two for an encoder-decoder) whatever
  the depth. Inside the trunk, what precedes the first block and follows the last (the embeddings, the final norm)
  stays eager: it shares one forward with the loop over the blocks, and a region around that would be the whole
  trunk. A model whose own forward runs its blocks (their list is its child, as in nanoGPT) keeps its head eager,
  and so does one whose forward something replaced or hooks (FSDP, accelerate's dispatch, accelerate's mixed
  precision: a bf16 or fp16 Trainer job's), which the region would trace. Left off by name (`head`, compile_time.py).
- A model that builds a per-layer cache in training (transformers' `config.use_cache`, true by default), or has
  no repeated blocks, is compiled whole, as accelerate does without the variable: with the cache each block reads
  its own layer's entry, so Dynamo would compile the block once per layer and, past its recompile limit (8), run
  the remaining layers uncompiled. The Trainer turns `use_cache` off itself; an Accelerate loop sets
  `model.config.use_cache = False` before `prepare`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..patching import DEFAULT, LibraryChange
from ..replace import replace_once, set_once
from .repeated_blocks import repeated_kinds

log = logging.getLogger("opentc_launcher")

VARIABLE = "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"
# region_boundary.RegionBoundary's name, as Dynamo's graph-break messages give it: those breaks are the boundary's
# own, made on purpose, and the compile report leaves them out (inductor/session.py).
BOUNDARY_NAME = "RegionBoundary"


def _wrapped(model: Any) -> Any:
    """The model inside DDP (or DataParallel): what holds the blocks."""
    inner = getattr(model, "module", None)
    return inner if inner is not None and hasattr(inner, "named_children") else model


def builds_per_layer_cache(model: Any) -> bool:
    """Whether a transformers model (or one wrapped by DDP) would build a per-layer cache in its forward pass: its
    config says use_cache."""
    config = getattr(_wrapped(model), "config", None)
    return config is not None and getattr(config, "use_cache", False) is True


def _has_repeated_blocks(module: Any) -> bool:
    return any(repeated_kinds(m) for m in module.modules())


@dataclass
class InPlace:
    """What compile_in_place compiled: repeated blocks and their kinds (one graph each), other parts compiled,
    single layers left eager; and, where compile_regions compiled the head too, what that region holds."""
    blocks: int = 0
    kinds: int = 0
    parts: int = 0
    single: int = 0
    head: str = ""      # the head region in words ("GPT2LMHeadModel's forward around transformer: lm_head and ...")
    head_left: str = ""   # why the head was left eager, where it was asked for

    def add(self, other: InPlace) -> None:
        self.blocks, self.kinds = self.blocks + other.blocks, self.kinds + other.kinds
        self.parts, self.single = self.parts + other.parts, self.single + other.single

    def sharing(self) -> str:
        return f"sharing one graph per kind of block ({self.kinds} kind{'' if self.kinds == 1 else 's'})"

    def rest(self) -> str:
        """What else was compiled and what was left eager, in words, after the blocks."""
        words = f"{self.parts} other part(s)"
        if self.head:
            return f"{words}, and {self.head} as one region; {self.single} single layer(s) beside the blocks left eager"
        left = f" (the head too: {self.head_left})" if self.head_left else ""
        return f"and {words}; {self.single} single layer(s) left eager{left}"


def compile_in_place(module: Any, **compile_kwargs: Any) -> InPlace:
    """Compile, in place, each repeated block (repeated_blocks.py) and each other part with parts of its own,
    leaving single layers eager."""
    done = InPlace()
    for child in module.children():
        if kinds := repeated_kinds(child):
            for block in child:
                block.compile(**compile_kwargs)
            done.add(InPlace(blocks=len(child), kinds=kinds))
        elif _has_repeated_blocks(child):
            done.add(compile_in_place(child, **compile_kwargs))
        elif next(child.children(), None) is not None:
            child.compile(**compile_kwargs)
            done.parts += 1
        else:
            done.single += 1
    return done


def _hooked(module: Any) -> bool:
    """Whether something replaced or hooks the module's forward (accelerate's big-model dispatch, FSDP's fully_shard):
    a region compiled around it would trace that code too."""
    return "forward" in vars(module) or bool(getattr(module, "_forward_pre_hooks", None)) or bool(
        getattr(module, "_forward_hooks", None))


def trunks_of(model: Any) -> tuple[list[str], str]:
    """The names of the model's children that hold its repeated blocks (its trunks), where the model's own forward
    can be compiled around them (the head); else [] and why not."""
    children = list(model.named_children())
    if any(repeated_kinds(child) for _, child in children):
        return [], "the model's own forward runs its blocks"
    trunks = [(name, child) for name, child in children if _has_repeated_blocks(child)]
    if not trunks:
        return [], "the model's blocks are deeper than its children"
    if getattr(model, "_original_forward", None) is not None and "forward" in vars(model):
        # Accelerator.prepare_model keeps the forward it wraps there (its mixed precision: autocast, outputs to fp32)
        return [], "accelerate's mixed precision wraps its forward (autocast, its outputs made fp32)"
    if _hooked(model) or any(_hooked(child) for _, child in trunks):
        return [], "a hook replaces or wraps its forward or its blocks' part's"
    return [name for name, _ in trunks], ""


def compile_head(model: Any, trunks: list[str], **compile_kwargs: Any) -> str:
    """Compile the model's own forward in place, its trunks' forwards behind a boundary (the module's docstring);
    what the region holds, in words."""
    from .region_boundary import RegionBoundary

    for name in trunks:
        trunk = getattr(model, name)
        set_once(trunk, "forward", RegionBoundary(trunk))
    model.compile(**compile_kwargs)
    layers = [name for name, _ in model.named_children() if name not in trunks]
    holds = ", ".join(layers) if layers else "no layer of its own"
    return (f"{type(model).__name__}'s own forward around {' and '.join(trunks)} ({holds}, and its loss if it "
            f"computes one)")


def compile_regions(model: Any, head: bool, **compile_kwargs: Any) -> InPlace:
    """The repeated blocks (and other parts) compiled in place, and with `head` the model's own forward around the
    trunks that hold them as a region of its own (compile_head), where it has such trunks."""
    trunks, why_not = trunks_of(model) if head else ([], "")
    if not trunks:
        done = compile_in_place(model, **compile_kwargs)
        done.head_left = why_not
        return done
    done = InPlace()
    for name in trunks:
        done.add(compile_in_place(getattr(model, name), **compile_kwargs))
    done.head = compile_head(model, trunks, **compile_kwargs)
    return done


def compile_blocks(model: Any, *, head: bool = True, head_left: Callable[[str], None] | None = None,
                   **compile_kwargs: Any) -> Any:
    """What Accelerator.prepare_model calls for regional compilation (the module's docstring): the model itself,
    compiled in place, or the whole model compiled (a new wrapper) where regional compilation cannot help.
    `head_left` receives why the head was left eager where it was asked for (for the compile report)."""
    import torch

    reason = _whole_reason(model, compile_kwargs,   # the Trainer's torch_compile_mode among them
                           "accelerator.prepare to compile it regionally (the Trainer does this itself)")
    if reason is not None:
        log.info("regional compilation: %s", reason)
        return unpatched_compile(torch)(model, **compile_kwargs)
    done = compile_regions(_wrapped(model), head, **compile_kwargs)
    log.info("regional compilation: %d repeated blocks compiled in place, %s, %s", done.blocks, done.sharing(),
             done.rest())
    _tell_head_left(done, head_left)
    return model


def _tell_head_left(done: InPlace, head_left: Callable[[str], None] | None) -> None:
    if head_left is not None and done.head_left:
        head_left(done.head_left)


def patch_accelerator(accelerator: ModuleType, head: bool = True,
                      head_left: Callable[[str], None] | None = None) -> bool:
    """Make Accelerator.prepare_model (accelerate.accelerator's own name compile_regions) call compile_blocks, with
    the head compiled or not (`head_left` as compile_blocks has it). False when this accelerate has no
    compile_regions there: its own regional compilation, if any, runs."""
    if not callable(getattr(accelerator, "compile_regions", None)):
        return False
    set_once(accelerator, "compile_regions", functools.partial(compile_blocks, head=head, head_left=head_left))
    return True


def _whole_reason(model: Any, compile_kwargs: dict[str, Any], cache_off_before: str) -> str | None:
    """Why `model` is compiled whole rather than regionally (CUDA graphs asked for, a per-layer cache, or no repeated
    blocks), in words that say where to turn the cache off (`cache_off_before`); None where its blocks can be
    compiled in place."""
    graphs = asks_for_cuda_graphs(compile_kwargs)
    if graphs:
        return CUDA_GRAPHS_WHOLE.format(graphs)
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
    return _whole_reason(model, compile_kwargs, "torch.compile to compile it regionally")


CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")   # torch.compile's modes that replay the graphs as CUDA graphs
CUDA_GRAPHS_WHOLE = "compiled whole: {} asks for CUDA graphs, measured on the whole model, not on regions"


def asks_for_cuda_graphs(compile_kwargs: dict[str, Any]) -> str:
    """How torch.compile's arguments ask for CUDA graphs ('' where they do not): its mode, or Inductor's option.
    The step replayed as CUDA graphs was measured whole (benchmarks/RESULTS.md, the H200's figure 10: 3.10x eager
    against 2.20x without them); many regions, each a graph of its own between eager layers, never were."""
    mode = compile_kwargs.get("mode")
    if mode in CUDA_GRAPH_MODES:
        return f"mode={mode!r}"
    options = compile_kwargs.get("options")
    if isinstance(options, dict) and options.get("triton.cudagraphs"):
        return "options={'triton.cudagraphs': True}"
    return ""


def unpatched_compile(torch_module: ModuleType) -> Any:
    """torch.compile as torch defines it, whether or not patch_torch_compile replaced it."""
    compile = torch_module.compile
    return compile.__wrapped__ if getattr(compile, "__opentc_patch__", False) else compile


def patch_torch_compile(torch_module: ModuleType, noted: Callable[[str], None], head: bool = True,
                        head_left: Callable[[str], None] | None = None) -> None:
    """torch.compile(model) of a module with repeated blocks compiles them in place (why_whole), with `head` the
    model's own forward around them too (compile_regions), and returns what torch would have: a wrapper whose
    `_orig_mod` is the model (state_dict names with `_orig_mod.`, accelerate and transformers unwrap it), here one
    that compiles nothing more itself. Everything else (a function, a decorator, fullgraph=True, disable=True, a model
    compiled whole for a reason logged) goes to torch's own. `noted` receives what was done, for the compile report."""
    original = unpatched_compile(torch_module)

    def compile(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if model is None or args or kwargs.get("disable") or not isinstance(model, torch_module.nn.Module):
            return original(model, *args, **kwargs)
        reason = why_whole(model, kwargs)
        if reason is not None:
            log.info("regional compilation: torch.compile(%s) %s", type(model).__name__, reason)
            return original(model, **kwargs)
        done = compile_regions(_wrapped(model), head, **kwargs)
        words = (f"torch.compile({type(model).__name__}) compiled its {done.blocks} repeated blocks in place, "
                 f"{done.sharing()}, {done.rest()}")
        log.info("regional compilation: %s", words)
        noted(words)
        _tell_head_left(done, head_left)
        return torch_module.compiler.disable(model)

    replace_once(torch_module, "compile", compile)


TORCH_COMPILE = LibraryChange(
    name="torch-compile-regional", module="torch", target="torch.compile", kind=DEFAULT, default="regional",
    backend="inductor", apply=patch_torch_compile,
    why="a plain script's torch.compile(model) of a model with repeated blocks compiles each kind of block once, in "
        "place, and returns torch's wrapper; anything else goes to torch's own",
    unpatched="torch.compile(model) compiles the whole model as one graph")
ACCELERATE_COMPILE_REGIONS = LibraryChange(
    name="accelerate-compile-regions-in-place", module="accelerate.accelerator",
    target="accelerate.accelerator.compile_regions", kind=DEFAULT, default="regional", backend="inductor",
    apply=patch_accelerator,
    why="Accelerator.prepare_model's regional compilation (the Trainer's) compiles the repeated blocks in place, "
        "where accelerate's own makes a copy whose state_dict names carry _orig_mod.",
    unpatched="accelerate's own compile_regions runs (ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION stays set)")
HEAD_BOUNDARY = LibraryChange(
    name="trunk-behind-a-region-boundary", module="torch.nn", target="torch.nn.Module.forward", kind=DEFAULT,
    default="head", backend="inductor", apply=compile_head,
    why="with the head compiled as one region, the forward of the model's part that holds its blocks (GPT-2's "
        "transformer) is put behind a boundary where the compiled forward breaks and resumes (an instance's "
        "forward, the model's own: the class is left alone)",
    unpatched="the output layer and the loss run op by op")
CHANGES = (TORCH_COMPILE, ACCELERATE_COMPILE_REGIONS, HEAD_BOUNDARY)

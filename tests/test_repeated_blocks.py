"""Which ModuleLists regional compilation compiles block by block (opentc_launcher.inductor.repeated_blocks), value
by value: tiny synthetic lists, and a T5 built from its config, whose stacks' first blocks carry the relative
position bias table. Nothing compiles here (Module.compile is lazy); tests/test_inductor.py compiles T5 regionally
with Inductor, against eager, and counts its graphs."""

import types

import pytest
import torch

from opentc_launcher.inductor.per_layer import per_layer_finding
from opentc_launcher.inductor.regional import (
    BOUNDARY_NAME,
    InPlace,
    compile_in_place,
    patch_torch_compile,
    why_whole,
)
from opentc_launcher.inductor.repeated_blocks import MAX_KINDS, repeated_kinds


class Block(torch.nn.Module):
    def __init__(self, width: int = 8, out: int | None = None, extra: str = ""):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.mix = torch.nn.Linear(width, out or width)
        if extra:   # a member only some blocks carry, as T5's first block carries its position bias table
            setattr(self, extra, torch.nn.Embedding(4, 2))


class OtherBlock(Block):
    """Another class with the same members."""


def blocks(*made: torch.nn.Module) -> torch.nn.ModuleList:
    return torch.nn.ModuleList(made)


@pytest.mark.parametrize(("listed", "kinds"), [
    (blocks(Block(), Block(), Block()), 1),                                     # alike
    (blocks(Block(extra="bias"), Block(), Block(), Block()), 2),                # the first carries more (T5)
    (blocks(Block(extra="bias"), Block()), 2),                                  # T5 at depth 2: one of each kind
    (blocks(Block(), Block(), Block(extra="bias")), 2),                         # the last carries more
    (blocks(Block(extra="a"), Block(extra="b"), Block(), Block(), Block()), 3),           # three kinds, most alike
    (blocks(Block(8, 16), Block(16, 8), Block(8, 8)), 0),                       # a pyramid: three widths
    (blocks(*(Block(w, w // 2) for w in (64, 32, 16, 8, 4))), 0),               # a pyramid of five widths
    (blocks(Block(8, 16), Block(16, 8)), 0),                                    # two widths: two layers, not kinds
    (blocks(Block(16), Block(), Block(), Block()), 0),                          # one wider: another layer, not extras
    (blocks(Block(), Block().to(torch.float64), Block()), 0),                   # another dtype: another layer
    (blocks(Block(), OtherBlock(), Block()), 0),                                # mixed classes
    (blocks(Block(extra="a"), Block(extra="b"), Block(extra="c"), *(Block() for _ in range(5))), 0),   # 4 kinds
    (blocks(Block(), Block(), Block(extra="a"), Block(extra="a"), Block(extra="b")), 0),  # most common: 2 of 5
    (blocks(Block()), 0),                                                       # one block repeats nothing
    (torch.nn.Sequential(Block(), Block()), 0),                                 # not a ModuleList
])
def test_the_kinds_of_block_a_list_holds_where_its_blocks_repeat_else_none(listed, kinds):
    assert repeated_kinds(listed) == kinds


def test_at_most_max_kinds_of_block():
    """The bound the docstring argues for (Dynamo's recompile limit, 8, shared by the block class's kinds)."""
    assert MAX_KINDS == 3
    extras = [Block(extra=f"x{i}") for i in range(MAX_KINDS - 1)]
    assert repeated_kinds(blocks(*extras, *(Block() for _ in range(MAX_KINDS)))) == MAX_KINDS
    more = [Block(extra=f"x{i}") for i in range(MAX_KINDS)]
    assert repeated_kinds(blocks(*more, *(Block() for _ in range(MAX_KINDS + 1)))) == 0


def tiny_t5(layers: int) -> torch.nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_heads=2,
                                               num_layers=layers, use_cache=False, decoder_start_token_id=0))


def compiled(module: torch.nn.Module) -> bool:
    return getattr(module, "_compiled_call_impl", None) is not None


@pytest.mark.parametrize("layers", [2, 6])
def test_a_t5s_stacks_compile_in_place_as_two_kinds_of_block_each(layers):
    """Each stack's block 0 has relative_attention_bias (an Embedding) besides the members every block has: blocks
    of one class in two kinds, at any depth. Compiled in place: every block, and nothing around them but what has
    parts of its own (here nothing: the embeddings, the final norms, the dropouts and lm_head are single layers)."""
    model = tiny_t5(layers)
    assert "layer.0.SelfAttention.relative_attention_bias.weight" in dict(model.encoder.block[0].named_parameters())
    assert repeated_kinds(model.encoder.block) == repeated_kinds(model.decoder.block) == 2
    names = sorted(model.state_dict())
    assert why_whole(model, {}) is None

    assert compile_in_place(model) == InPlace(blocks=2 * layers, kinds=4, parts=0, single=8)
    assert all(compiled(block) for block in [*model.encoder.block, *model.decoder.block])
    assert not any(compiled(m) for m in (model, model.encoder, model.decoder, model.shared, model.lm_head))
    assert sorted(model.state_dict()) == names                     # in place: the model keeps its names


def test_a_plain_scripts_torch_compile_of_a_t5_says_how_many_kinds_it_compiled():
    """What the log and the compile report say (patch_torch_compile on a stand-in for the torch module)."""
    notes: list[str] = []
    stand_in = types.SimpleNamespace(compile=torch.compile, nn=torch.nn, compiler=torch.compiler)
    patch_torch_compile(stand_in, notes.append)
    model = tiny_t5(3)
    assert stand_in.compile(model)._orig_mod is model
    assert notes == ["torch.compile(T5ForConditionalGeneration) compiled its 6 repeated blocks in place, sharing one "
                     "graph per kind of block (4 kinds), 0 other part(s), and T5ForConditionalGeneration's own forward "
                     "around encoder and decoder (shared, lm_head, and its loss if it computes one) as one region; 6 "
                     "single layer(s) beside the blocks left eager"]
    assert compiled(model) and not compiled(model.encoder) and not compiled(model.lm_head)    # the head: the model's
    assert type(model.encoder.forward).__name__ == type(model.decoder.forward).__name__ == BOUNDARY_NAME   # own forward
    without_head: list[str] = []
    other = types.SimpleNamespace(compile=torch.compile, nn=torch.nn, compiler=torch.compiler)
    patch_torch_compile(other, without_head.append, head=False)       # --defaults-off head: the blocks' regions only
    plain = tiny_t5(3)
    other.compile(plain)
    assert without_head[0].endswith("and 0 other part(s); 8 single layer(s) left eager") and not compiled(plain)
    hooked = tiny_t5(3)                      # FSDP's fully_shard, accelerate's dispatch: code a region would trace
    hooked.encoder.register_forward_pre_hook(lambda module, args: None)
    stand_in.compile(hooked)
    assert notes[-1].endswith("8 single layer(s) left eager (the head too: a hook replaces or wraps its forward or "
                              "its blocks' part's)") and not compiled(hooked), notes[-1]


def test_t5s_kinds_recompiling_the_block_are_not_taken_for_a_per_layer_value():
    """Dynamo's reasons when a 3-layer T5's blocks compile in place (torch 2.7: each new kind recompiles
    T5Block.forward once). They name an index ('0') but differ in more than it: kinds, not layers."""
    where = ".../transformers/models/t5/modeling_t5.py:448"
    reasons = ["0/0: KeyError on self._modules['layer']._modules['0']._modules['SelfAttention']._modules["
               "'relative_attention_bias']",
               "0/1: len(self._modules['layer']._modules) == 2",
               "0/2: KeyError on self._modules['layer']._modules['0']._modules['SelfAttention']._modules["
               "'relative_attention_bias']"]
    assert per_layer_finding([{"function": "forward", "where": where, "reason": r} for r in reasons], "-") is None


def test_accelerates_mixed_precision_wrapper_leaves_the_head_eager_and_the_report_says_so():
    """A bf16 or fp16 Trainer or Accelerate job: Accelerator.prepare_model wraps the model's forward (autocast, the
    outputs made fp32) before it compiles regionally, with accelerate's own functions, as below. A region around
    that forward would trace accelerate's wrapper, so the head stays eager (as it did on the H200, where the compile
    report still said `head: on`): the blocks compile, and the compile-time defaults' state names why."""
    from types import MethodType

    from accelerate.utils import convert_outputs_to_fp32

    from opentc_launcher.inductor.compile_time import CompileTimeDefaults
    from opentc_launcher.options import WorkerOptions

    model = tiny_t5(2)
    model._original_forward = model.forward                        # what prepare_model does with native AMP (its
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)         # get_mixed_precision_context_manager's, which
    model.forward = MethodType(autocast(model.forward.__func__), model)   # needs an Accelerator made first)
    model.forward = MethodType(convert_outputs_to_fp32(model.forward.__func__), model)
    defaults = CompileTimeDefaults(WorkerOptions(backend="inductor", device="cpu"), "rank0")
    defaults.state["regional"] = "on: ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=true"   # as configure() sets them
    defaults.state["head"] = defaults._head_state()
    assert defaults.state["head"].startswith("on: ")
    stand_in = types.SimpleNamespace(compile_regions=lambda model, **kwargs: model)   # accelerate.accelerator's name
    defaults._refine_accelerate(stand_in, head=True)
    assert stand_in.compile_regions(model) is model
    assert all(compiled(block) for block in [*model.encoder.block, *model.decoder.block]) and not compiled(model)
    why = "accelerate's mixed precision wraps its forward (autocast, its outputs made fp32)"
    assert defaults.state["head"].endswith(f"; left eager where asked: {why}"), defaults.state
    assert defaults.state["regional"] == "on: ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=true"

    plain = tiny_t5(2)                                             # fp32: no wrapper, the head is a region
    defaults._refine_accelerate(stand_in, head=True)
    stand_in.compile_regions(plain)
    assert compiled(plain) and type(plain.encoder.forward).__name__ == BOUNDARY_NAME
    assert defaults.state["head"].count("left eager where asked") == 1

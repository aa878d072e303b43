"""Gradient checkpointing on real torch-xla (CPU), before and after the library patch torch-checkpoint-xla-rng, and
prints JSON for tests/test_xla_checkpoint.py.

A two-block residual MLP with dropout (p=0.5) between its layers: its gradients checkpointed (use_reentrant True and
False) against the same computation without checkpointing on XLA, from the same RNG state, and against eager PyTorch
on the CPU given the dropout masks XLA drew. Without the stashed and restored RNG state (preserve_rng_state=False),
the recompute draws other masks: that run shows the comparison would see it.
"""

import json
import sys

import torch
import torch.utils.checkpoint as checkpoint
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

from opentc_launcher.patching import apply
from opentc_launcher.xla import library_patches

P = 0.5
SEED = 1234


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)
        self.masks: list[torch.Tensor] = []   # the masks dropout drew, outside checkpointing
        self.given_mask: torch.Tensor | None = None   # eager's run: XLA's mask instead of its own draw

    def forward(self, x):
        h = torch.nn.functional.gelu(self.up(x))
        if self.given_mask is not None:
            h = h * self.given_mask / (1 - P)
        else:
            h = torch.nn.functional.dropout(h, P, training=True)
            if torch.is_grad_enabled() and not checkpointing:
                self.masks.append(h != 0)
        return x + self.down(h)


checkpointing = False
torch.manual_seed(0)
cpu_blocks = torch.nn.ModuleList([Block(), Block()])
inputs = torch.randn(8, 16)
device = torch_xla.device()
blocks = torch.nn.ModuleList([Block(), Block()])
blocks.load_state_dict(cpu_blocks.state_dict())
blocks.to(device)


def gradients(model, x, use_reentrant=None, preserve_rng_state=True):
    """The gradients of every parameter and of the input, on the CPU; None for use_reentrant: not checkpointed."""
    global checkpointing
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_()
    h = x
    checkpointing = use_reentrant is not None
    for block in model:
        h = block(h) if use_reentrant is None else checkpoint.checkpoint(
            block, h, use_reentrant=use_reentrant, preserve_rng_state=preserve_rng_state)
    h.pow(2).mean().backward()
    checkpointing = False
    return [g.detach().cpu() for g in [*(p.grad for p in model.parameters()), x.grad]]


def on_xla(use_reentrant=None, preserve_rng_state=True):
    xm.set_rng_state(SEED)
    grads = gradients(blocks, inputs.to(device), use_reentrant, preserve_rng_state)
    rng_after = xm.get_rng_state()
    torch_xla.sync()
    return grads, rng_after


def max_difference(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def error_of(fn):
    try:
        fn()
    except AttributeError as e:
        return str(e)
    return None


out = {"unpatched_error": {str(r): error_of(lambda r=r: on_xla(use_reentrant=r)) for r in (True, False)},
       "applied": apply(library_patches.TORCH_CHECKPOINT_XLA_RNG, checkpoint),
       "device_module": getattr(torch, "xla", None).__name__}

plain, rng_after_plain = on_xla()
masks = [m.cpu() for block in blocks for m in block.masks]
out["dropped_share"] = float(1 - torch.cat([m.flatten() for m in masks]).float().mean())

for block, mask in zip(cpu_blocks, masks, strict=True):
    block.given_mask = mask
eager = gradients(cpu_blocks, inputs)
out["plain_vs_eager"] = max_difference(plain, eager)

for use_reentrant in (True, False):
    checkpointed, rng_after = on_xla(use_reentrant)
    out[f"use_reentrant={use_reentrant}"] = {
        "vs_plain": max_difference(checkpointed, plain),
        "vs_eager": max_difference(checkpointed, eager),
        "rng_state_after_backward_as_plain": rng_after == rng_after_plain,
        "without_rng_state_vs_plain": max_difference(on_xla(use_reentrant, preserve_rng_state=False)[0], plain),
    }

# fork_rng on its own, over every XLA device (device_count): the state drawn from inside is put back.
before = xm.get_rng_state()
with torch.random.fork_rng(device_type="xla"):
    xm.set_rng_state(SEED + 1)
    torch.rand(4, device=device)
out["fork_rng_puts_the_state_back"] = xm.get_rng_state() == before

# Every step after the first runs the graphs the first compiled: restoring the RNG state makes no new graph.
on_xla(use_reentrant=False)
compiled = met.counter_value("UncachedCompile") or 0
for _ in range(3):
    on_xla(use_reentrant=False)
out["graphs_compiled_by_three_more_steps"] = (met.counter_value("UncachedCompile") or 0) - compiled
out["reference_gradient_size"] = max(float(g.abs().max()) for g in eager)
json.dump(out, sys.stdout)

"""A plain training loop that calls torch.compile(model) itself, on the models named (--models, default gpt2,pyramid),
each beside an eager twin that starts from the same weights and sees the same batches:

- gpt2: a GPT-2 (lm_head tied to the token embedding) built from a config, dropout at p=0 (the dropout modules are
  there, but draw nothing: eager and compiled kernels draw random numbers differently);
- pyramid: a ModuleList of blocks of one class but three widths, which are not one region;
- t5: the tiny T5 of tiny_t5.py, whose stacks' first blocks differ from the others (two kinds of block per stack).

After every step it compares the compiled model's loss and gradients with the twin's, and writes regional_metrics.json:
per model the losses, the largest relative gradient difference of any parameter at any step, what torch.compile
returned, and (for GPT-2) whether the weights are still tied.
"""

import argparse
import json
import os

import torch
from tiny_t5 import LENGTH, tiny_t5
from transformers import GPT2Config, GPT2LMHeadModel


class Block(torch.nn.Module):
    def __init__(self, width_in: int, width_out: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width_in)
        self.mix = torch.nn.Linear(width_in, width_out)

    def forward(self, x):
        return torch.tanh(self.mix(self.norm(x)))


class Pyramid(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(32, 32), Block(32, 16), Block(16, 8)])
        self.out = torch.nn.Linear(8, 1)

    def forward(self, x, labels):
        for block in self.blocks:
            x = block(x)
        return torch.nn.functional.mse_loss(self.out(x).squeeze(-1), labels)


def gpt2() -> torch.nn.Module:
    config = GPT2Config(n_layer=3, n_head=2, n_embd=32, vocab_size=120, n_positions=16, use_cache=False,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def t5() -> torch.nn.Module:
    return tiny_t5(120)


def batches(name: str, steps: int):
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        if name == "gpt2":
            ids = torch.randint(0, 120, (4, 16), generator=generator)
            yield {"input_ids": ids, "labels": ids}
        elif name == "t5":   # as t5_trainer.py's batches: 4 examples of LENGTH tokens in and out, no mask
            yield {"input_ids": torch.randint(2, 120, (4, LENGTH), generator=generator),
                   "labels": torch.randint(2, 120, (4, LENGTH), generator=generator)}
        else:
            yield {"x": torch.randn(8, 32, generator=generator), "labels": torch.randn(8, generator=generator)}


def loss_of(model, batch):
    out = model(**batch)
    return out if isinstance(out, torch.Tensor) else out.loss


def largest_gradient_difference(compiled: torch.nn.Module, eager: torch.nn.Module) -> float:
    worst = 0.0
    for (_, p), (_, q) in zip(compiled.named_parameters(), eager.named_parameters(), strict=True):
        scale = q.grad.abs().max().item() or 1.0
        worst = max(worst, (p.grad - q.grad).abs().max().item() / scale)
    return worst


def train(name: str, build, steps: int) -> dict:
    torch.manual_seed(0)
    model, eager = build(), build()
    eager.load_state_dict(model.state_dict())
    model.train(), eager.train()
    compiled = torch.compile(model)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, eager)]
    result = {"returned": type(compiled).__name__, "orig_mod_is_model": getattr(compiled, "_orig_mod", None) is model,
              "losses": [], "eager_losses": [], "largest_gradient_difference": 0.0}
    for batch in batches(name, steps):
        for m, key in ((compiled, "losses"), (eager, "eager_losses")):
            loss = loss_of(m, batch)
            loss.backward()
            result[key].append(loss.item())
        result["largest_gradient_difference"] = max(result["largest_gradient_difference"],
                                                    largest_gradient_difference(model, eager))
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    if name == "gpt2":
        result["tied"] = model.lm_head.weight is model.transformer.wte.weight
    if name == "t5":
        result["tied"] = model.lm_head.weight is model.shared.weight is model.encoder.embed_tokens.weight
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--models", default="gpt2,pyramid")
    args = p.parse_args()
    builders = {"gpt2": gpt2, "pyramid": Pyramid, "t5": t5}
    metrics = {name: train(name, builders[name], args.steps) for name in args.models.split(",")}
    with open(os.path.join(os.environ.get("SM_OUTPUT_DATA_DIR", "."), "regional_metrics.json"), "w") as f:
        json.dump(metrics, f)


if __name__ == "__main__":
    main()

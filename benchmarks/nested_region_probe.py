"""Does torch.compiler.nested_compile_region give eager's gradients on this torch? A table, one row per model,
backend and setting: the largest relative difference of any parameter's gradient from eager's after one forward
and backward pass (float rounding is about 1e-6; a lost gradient is 1).

    python benchmarks/nested_region_probe.py [--device cpu|cuda] [--backends aot_eager,inductor] [--json FILE]

Why it exists: the Inductor backend's `regional` default would rather mark a plain loop's repeated block as a
nested compile region (torch >= 2.12: the block traced and compiled once, the model still one graph) than compile
each block separately. On torch 2.14.1 with Inductor on CPU the marked region's gradients were wrong: 1.0 relative
for a residual block (with a dropout module at p=0 and without one), 1.5e3 for a 3-layer GPT-2; aot_eager was exact
(benchmarks/RESULTS.md, "Nested compile regions"). The backend therefore compiles blocks in place
(launcher/src/opentc_launcher/inductor/regional.py). Run this on a newer torch, or on a GPU, before switching: the
switch is right once every row reads about 1e-6. On a torch without the API it says so and measures nothing.

Models: `residual` (a residual block: LayerNorm, Linear, Dropout(p) added to its input, twice) at p=0 and without
dropout, and `gpt2` (transformers' GPT-2, 3 layers, dropout 0), each compiled whole ("whole") and with its block's
forward marked ("region").
"""

from __future__ import annotations

import argparse
import copy
import datetime
import time
from pathlib import Path

import torch
from compiler_benchmark import publish, table

HERE = Path(__file__).resolve().parent


class Residual(torch.nn.Module):
    def __init__(self, dropout: float | None):
        super().__init__()
        self.ln = torch.nn.LayerNorm(64)
        self.fc = torch.nn.Linear(64, 64)
        self.drop = torch.nn.Dropout(dropout) if dropout is not None else torch.nn.Identity()

    def forward(self, x):
        return x + self.drop(self.fc(self.ln(x)))


class ResidualNet(torch.nn.Module):
    def __init__(self, dropout: float | None):
        super().__init__()
        self.inp = torch.nn.Linear(64, 64)
        self.blocks = torch.nn.ModuleList(Residual(dropout) for _ in range(2))
        self.out = torch.nn.Linear(64, 256)

    def forward(self, x, labels):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return torch.nn.functional.cross_entropy(self.out(x).flatten(0, 1), labels.flatten())


def residual_case(dropout: float | None, device: torch.device):
    model = ResidualNet(dropout).to(device)
    x, labels = torch.randn(4, 16, 64, device=device), torch.randint(0, 256, (4, 16), device=device)
    return model, Residual, lambda m: m(x, labels)


def gpt2_case(device: torch.device):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    config = GPT2Config(n_layer=3, n_head=4, n_embd=64, vocab_size=256, n_positions=32, use_cache=False,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).to(device)
    ids = torch.randint(0, 256, (4, 32), device=device)
    return model, GPT2Block, lambda m: m(input_ids=ids, labels=ids).loss


CASES = {
    "residual, dropout p=0": lambda device: residual_case(0.0, device),
    "residual, no dropout": lambda device: residual_case(None, device),
    "gpt2 (3 layers, tied weights)": gpt2_case,
}


def largest_difference(model: torch.nn.Module, reference: torch.nn.Module) -> float:
    worst = 0.0
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        if q.grad is None:
            continue
        got = torch.zeros_like(q.grad) if p.grad is None else p.grad
        worst = max(worst, ((got - q.grad).norm() / q.grad.norm().clamp_min(1e-12)).item())
    return worst


def probe(case: str, backend: str, region: bool, device: torch.device) -> dict:
    torch.manual_seed(0)
    torch._dynamo.reset()
    reference, block_class, run = CASES[case](device)
    reference.train()
    model = copy.deepcopy(reference)
    run(reference).backward()
    original = block_class.forward
    if region:
        block_class.forward = torch.compiler.nested_compile_region(original)
    try:
        started = time.monotonic()
        run(torch.compile(model, backend=backend)).backward()
        seconds = time.monotonic() - started
    finally:
        block_class.forward = original
    return {"case": case, "backend": backend, "setting": "region" if region else "whole", "seconds": seconds,
            "largest_relative_difference": largest_difference(model, reference)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backends", default="aot_eager,inductor")
    p.add_argument("--json", default=str(HERE / "results" / "nested_region_probe.json"))
    args = p.parse_args()
    device = torch.device(args.device)
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "torch": torch.__version__,
               "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "rows": []}
    if not hasattr(torch.compiler, "nested_compile_region"):
        results["absent"] = f"torch {torch.__version__} has no torch.compiler.nested_compile_region (torch >= 2.12)"
    else:
        for case in CASES:
            for backend in args.backends.split(","):
                for region in (False, True):
                    results["rows"].append(probe(case, backend, region, device))
    lines = [f"torch {results['torch']} on {results['device']}, {results['date']}", ""]
    if "absent" in results:
        lines.append(results["absent"])
    else:
        lines.append(table(["model", "backend", "compiled", "first forward+backward (s)",
                            "largest relative gradient difference from eager"],
                           [[r["case"], r["backend"], r["setting"], f"{r['seconds']:.1f}",
                             f"{r['largest_relative_difference']:.1e}"] for r in results["rows"]]))
    publish(results, "\n".join(lines), args.json)


if __name__ == "__main__":
    main()

"""A tiny XLA training loop shared by the compile-behaviour scripts: one linear layer, AdamW, a sync per step."""

import argparse

import torch
import torch_xla


def loop(make_batch, steps, after_step=None, fail_at=None):
    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        x = make_batch(step).to(device)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if after_step:
            after_step(step, loss, x)
        torch_xla.sync()
        if step == fail_at:
            raise RuntimeError(f"loss diverged at step {step}")


def args(default_steps=12):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=default_steps)
    p.add_argument("--fail_at", type=int, default=None)
    return p.parse_known_args()[0]

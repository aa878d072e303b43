"""Trains in processes of its own, as torch-xla's examples do (test/test_train_mp_mnist.py's structure):
`torch_xla.launch(_mp_fn)` spawns them, MpDeviceLoader feeds them, xm.optimizer_step steps."""

import argparse
import json
import os

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


def _mp_fn(index, flags):
    torch.manual_seed(0)
    device = torch_xla.device()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = [(torch.randn(16 + (step if flags.changing_shapes else 0), 32), torch.randn(1))
               for step in range(flags.steps)]
    losses = []
    for step, (x, _) in enumerate(pl.MpDeviceLoader(batches, device)):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        xm.optimizer_step(optimizer)
        if step % 5 == 4:
            losses.append(loss.item())
    out = os.environ.get("SM_OUTPUT_DATA_DIR", ".")
    with open(os.path.join(out, f"launch-{index}.json"), "w") as f:
        json.dump({"index": index, "pid": os.getpid(), "losses": losses}, f)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--changing_shapes", type=lambda value: value.lower() == "true", default=False)
    torch_xla.launch(_mp_fn, args=(parser.parse_args(),))

"""A tiny training loop for the Inductor backend: compiled with torch.compile or not, with static or changing
shapes, with or without a graph break in its forward. Writes its losses to loop_metrics.json."""

import argparse
import json
import os
import sys

import torch


class Net(torch.nn.Module):
    def __init__(self, graph_break: bool):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
        self.graph_break = graph_break

    def forward(self, x):
        h = self.body(x)
        if self.graph_break:
            print("forward done", flush=True)   # GRAPH BREAK: Dynamo cannot trace print()
        return h.pow(2).mean()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compile", choices=["yes", "no"], default="yes")
    p.add_argument("--shapes", choices=["static", "changing"], default="static")
    p.add_argument("--graph_break", choices=["yes", "no"], default="no")
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.graph_break == "yes")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # dynamic=False: every new batch size is a new graph, as with a padding-free data pipeline.
    step = torch.compile(model, dynamic=False) if args.compile == "yes" else model
    generator = torch.Generator().manual_seed(0)
    losses = []
    for i in range(args.steps):
        rows = 8 if args.shapes == "static" else 4 + i
        loss = step(torch.randn(rows, 32, generator=generator))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    out = os.environ.get("SM_OUTPUT_DATA_DIR", ".")
    with open(os.path.join(out, "loop_metrics.json"), "w") as f:
        json.dump({"losses": losses, "torch_xla_imported": "torch_xla" in sys.modules}, f)


if __name__ == "__main__":
    main()

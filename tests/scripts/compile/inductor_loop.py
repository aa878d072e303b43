"""A tiny training loop for the Inductor backend: compiled with torch.compile or not, with static or changing
shapes, with or without a graph break in its forward. Writes its losses to loop_metrics.json.

--shapes changing: every batch size is a new graph (dynamic=False). --shapes varying: torch's default, a static
graph first and then one with the batch dimension dynamic; the sizes come in the order LOOP_ORDER names (up, the
default, or down), as data whose order changes from one job to the next without any argument changing."""

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
    p.add_argument("--shapes", choices=["static", "changing", "varying"], default="static")
    p.add_argument("--graph_break", choices=["yes", "no"], default="no")
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.graph_break == "yes")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # dynamic=False: every new batch size is a new graph, as with a padding-free data pipeline.
    dynamic = None if args.shapes == "varying" else False
    step = torch.compile(model, dynamic=dynamic) if args.compile == "yes" else model
    sizes = [8 + i for i in range(args.steps)]
    if os.environ.get("LOOP_ORDER") == "down":
        sizes.reverse()
    generator = torch.Generator().manual_seed(0)
    losses = []
    for i in range(args.steps):
        rows = {"static": 8, "changing": 4 + i, "varying": sizes[i]}[args.shapes]
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

"""A plain script that shards its model with PyTorch's FSDP2 (`fully_shard`) and compiles it with `torch.compile`
itself, as issue 25's plain-script case: each block sharded, then the root, the optimizer created after sharding,
each rank training on its own slice of every global batch. Prints `step N loss X` (the mean over every rank, so one
process on the whole batch prints the same curve) and writes losses.json to SM_MODEL_DIR (or --out).

    python fsdp2_compile.py [--steps 8] [--compile yes|no] [--out DIR]
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--compile", choices=["yes", "no"], default="yes")
p.add_argument("--out", default=os.environ.get("SM_MODEL_DIR", "."))
args = p.parse_args()

world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if world > 1:
    dist.init_process_group("gloo")


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, width: int = 32, depth: int = 3):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x).squeeze(-1)


torch.manual_seed(0)   # the same initial weights on every rank, and in a single process
model = Model()
sharded = False
if world > 1:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:   # torch 2.5/2.6 kept it under _composable
        from torch.distributed._composable.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    sharded = all(type(p).__name__ == "DTensor" for p in model.parameters())
if args.compile == "yes":
    model = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)   # after sharding: it holds the shards

data = torch.Generator().manual_seed(1)
global_batch = 8
losses = []
for step in range(args.steps):
    x = torch.randn(global_batch, 32, generator=data)
    y = x.sum(dim=1) / 8
    per_rank = global_batch // world
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
    loss.backward()   # FSDP2 averages the gradients over the ranks: the whole batch's mean-loss gradient
    optimizer.step()
    optimizer.zero_grad()
    reported = loss.detach().clone()
    if world > 1:
        dist.all_reduce(reported)
        reported /= world
    losses.append(reported.item())
    if rank == 0:
        print(f"step {step} loss {losses[-1]:.6f}", flush=True)

if rank == 0:
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "losses.json"), "w") as f:
        json.dump({"losses": losses, "world": world, "sharded": sharded}, f)
if world > 1:
    dist.destroy_process_group()

"""A plain script that shards its model with PyTorch's FSDP2 (`fully_shard`) and compiles it with `torch.compile`
itself, as issue 25's plain-script case: each block sharded, then the root, the optimizer created after sharding,
each rank training on its own slice of every global batch. Prints `step N loss X` (the mean over every rank, so one
process on the whole batch prints the same curve) and writes losses.json to SM_MODEL_DIR (or --out).

With --checkpoints DIR (SageMaker's is /opt/ml/checkpoints, which it syncs to S3 and restores on a managed-spot
restart) it saves model and optimizer after every step with torch.distributed.checkpoint, each rank its own shard,
into DIR/step-NNNNNN; the loss history so far beside them (progress.json, written after the shards, so a step whose
save a stop cut short has none and is not resumed from). Started again with the same folder it resumes after the
newest complete step. --pause-after-step N waits (up to 300 s) after saving step N, so a test can stop it there.

    python fsdp2_compile.py [--steps 8] [--compile yes|no] [--out DIR] [--checkpoints DIR] [--pause-after-step N]
"""

import argparse
import glob
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--compile", choices=["yes", "no"], default="yes")
p.add_argument("--out", default=os.environ.get("SM_MODEL_DIR", "."))
p.add_argument("--checkpoints", default="")
p.add_argument("--pause-after-step", "--pause_after_step", type=int, default=-1)
p.add_argument("--optimizer-before-sharding", "--optimizer_before_sharding", choices=["yes", "no"], default="no",
               help="the model-parallel guide's pitfall: the optimizer holds parameters the sharded model drops")
args = p.parse_args()

world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
device = torch.device("cpu")
if torch.cuda.is_available():   # the GPU gate: one GPU per worker, NCCL
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
if world > 1:
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


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
model = Model().to(device)
early_optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2) if args.optimizer_before_sharding == "yes" else None
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
net = model   # the sharded module: its state dict has the model's own names, not torch.compile's wrapper's
if args.compile == "yes":
    model = torch.compile(model)
optimizer = early_optimizer or torch.optim.AdamW(model.parameters(), lr=1e-2)   # after sharding: it holds the shards


def newest_complete(folder: str) -> str | None:
    done = sorted(glob.glob(os.path.join(folder, "step-*", "progress.json")))
    return os.path.dirname(done[-1]) if done else None


losses: list[float] = []
start = 0
if args.checkpoints:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    found = newest_complete(args.checkpoints)
    if found:
        model_state, optim_state = get_state_dict(net, optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=found)   # each rank reads its own shard
        set_state_dict(net, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        with open(os.path.join(found, "progress.json")) as f:
            losses = json.load(f)["losses"]
        start = len(losses)
        if rank == 0:
            print(f"resumed from {found} after step {start - 1}", flush=True)


def save(step: int) -> None:
    folder = os.path.join(args.checkpoints, f"step-{step:06d}")
    model_state, optim_state = get_state_dict(net, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder)
    if world > 1:
        dist.barrier()   # every rank's shard is written before the step counts as saved
    if rank == 0:
        with open(os.path.join(folder, "progress.json.tmp"), "w") as f:
            json.dump({"losses": losses}, f)
        os.replace(os.path.join(folder, "progress.json.tmp"), os.path.join(folder, "progress.json"))


global_batch = 8
for step in range(start, args.steps):
    # each step's batch from its own seed: a resumed run sees the batches the uninterrupted one saw
    x = torch.randn(global_batch, 32, generator=torch.Generator().manual_seed(1000 + step)).to(device)
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
    if args.checkpoints:
        save(step)
        if step == args.pause_after_step:
            time.sleep(300)   # the test stops the job here; if it never does, training goes on

if rank == 0:
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "losses.json"), "w") as f:
        json.dump({"losses": losses, "world": world, "sharded": sharded, "device": device.type}, f)
if world > 1:
    dist.destroy_process_group()

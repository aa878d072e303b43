"""DDP with torch.compile, over NCCL on GPUs (one per worker; the GPU gate) or gloo on CPU workers (the tests): the
replicas must stay in step (equal weights after training), which only real collectives give. Each rank writes
ddp-rank<N>.json.

--order compile_then_wrap (default): DDP(torch.compile(model)), which compiles on torch 2.7;
--order wrap_then_compile: torch.compile(DDP(model)), which on torch 2.7 graph-breaks inside DDP and compiles
nothing (the compile report names the break and the order that works).
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--order", choices=["compile_then_wrap", "wrap_then_compile"], default="compile_then_wrap")
args = parser.parse_args()
cuda = torch.cuda.is_available()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if cuda else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(device)
ids = [device.index] if cuda else None
if args.order == "compile_then_wrap":
    model = compiled = DistributedDataParallel(torch.compile(net), device_ids=ids)
else:
    model = DistributedDataParallel(net, device_ids=ids)
    compiled = torch.compile(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
generator = torch.Generator().manual_seed(rank)   # each rank its own data: only the all-reduce keeps them equal
for _ in range(3):
    loss = compiled(torch.randn(8, 16, generator=generator).to(device)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(weights) for _ in range(world)]
dist.all_gather(gathered, weights)
record = {"rank": rank, "world": world, "replicas_equal": all(torch.equal(g, gathered[0]) for g in gathered),
          "weights_sum": float(weights.sum()), "torch_xla_imported": "torch_xla" in sys.modules,
          "backend": dist.get_backend(), "device": str(device)}
dist.destroy_process_group()
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"ddp-rank{rank}.json"), "w") as f:
    json.dump(record, f)

"""One epoch over a DistributedSampler of --samples samples (--drop_last yes|no), two or more workers over gloo;
writes the indices each rank saw to SM_MODEL_DIR/indices-rank<N>.json."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--samples", type=int, default=10)
p.add_argument("--drop_last", choices=["yes", "no"], default="no")
args = p.parse_args()
dist.init_process_group("gloo")
data = TensorDataset(torch.arange(args.samples))
sampler = DistributedSampler(data, shuffle=False, drop_last=args.drop_last == "yes")
seen = [int(i) for (batch,) in DataLoader(data, batch_size=2, sampler=sampler) for i in batch]
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"indices-rank{dist.get_rank()}.json"), "w") as f:
    json.dump(seen, f)
# A rank that leaves without one collective can close its gloo connection before its peer has taken it in:
# init_process_group returns on the side that connects first, and the slower side then fails "Connection
# closed by peer" (seen once in CI on a busy machine). Real training does a collective before it ends.
dist.barrier()
dist.destroy_process_group()

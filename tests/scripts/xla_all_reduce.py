"""One XLA all-reduce across every worker of the job, its result written per rank (the buildspec's GPU gate).

Each rank contributes rank + 1 on its own XLA device; the sum must be world * (world + 1) / 2 everywhere.
"""

import json
import os

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

device = torch_xla.device()
rank, world = xr.global_ordinal(), xr.world_size()
value = torch.tensor([float(rank + 1)], device=device)
total = xm.all_reduce(xm.REDUCE_SUM, value)
torch_xla.sync()
record = {"rank": rank, "world": world, "sum": float(total.cpu().item()), "device": str(device),
          "pjrt_device": os.environ.get("PJRT_DEVICE")}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"all-reduce-rank{rank}.json"), "w") as f:
    json.dump(record, f)
print("all-reduce", record, flush=True)

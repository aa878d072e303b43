"""Records where the launch put this worker, then proves the workers can talk: an all-reduce over gloo."""

import json
import os
import sys

import torch
import torch.distributed as dist

keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "PJRT_DEVICE", "PJRT_LOCAL_PROCESS_RANK", "USE_TORCH_XLA", "SM_CURRENT_HOST", "SM_HOSTS"]
record = {k: os.environ.get(k) for k in keys}
record["argv"] = sys.argv[1:]
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    record["all_reduce_sum"] = value.item()
    dist.destroy_process_group()
record["torch_xla_imported"] = "torch_xla" in sys.modules
rank = os.environ.get("RANK", "0")
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"env-rank{rank}.json"), "w") as f:
    json.dump(record, f)

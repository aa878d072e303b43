"""Records the world it was given and where SageMaker's variables point; given a world (RANK set, as torchrun and
opentc-run set it), creates a process group (env://) and all-reduces."""

import json
import os

import torch
import torch.distributed as dist

keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PET_NNODES",
        "TORCHELASTIC_RUN_ID", "SM_MODEL_DIR", "SM_CHANNEL_TRAIN"]
record = {k: os.environ.get(k) for k in keys}
if "RANK" in os.environ:
    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    record["all_reduce_sum"] = value.item()
    record["world"] = dist.get_world_size()
    dist.destroy_process_group()
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"world-rank{record['RANK'] or 0}.json"), "w") as f:
    json.dump(record, f)

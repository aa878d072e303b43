"""One worker of a multi-host job: an all-reduce over gloo with the others, then, with --orphan yes, a process left
behind that ignores SIGTERM, so that this host's `train` takes a few seconds more to end than the others' (it stops
what the script left behind: SIGTERM, a wait, SIGKILL)."""

import argparse
import os
import subprocess

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--orphan", choices=("yes", "no"), default="no")
args = p.parse_args()
dist.init_process_group("gloo")
value = torch.tensor([1.0])
dist.all_reduce(value)
dist.destroy_process_group()
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"sum-rank{os.environ['RANK']}.txt"), "w") as f:
    f.write(str(value.item()))
if args.orphan == "yes":
    subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60"], start_new_session=True)

"""A training script as AWS's sm_dist ran it (xla_spawn style: `_mp_fn` and a main block), with a strict
argument parser: records what it received and where, after one small XLA computation."""

import argparse
import json
import os
import sys

torch_xla_before = "torch_xla" in sys.modules   # imported by the worker's bootstrap, not by this script


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, required=True)
    parser.add_argument("--learning_rate", type=float, required=True)
    parser.add_argument("--n_gpus", type=int, required=True)
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--do_eval", action="store_true")
    args = parser.parse_args()   # anything unexpected (training_script, worker_port, "True") stops it

    import torch
    import torch_xla

    device = torch_xla.device()
    value = (torch.arange(4.0, device=device) * 2).sum()
    torch_xla.sync()
    record = {
        "argv": sys.argv[1:],
        "args": vars(args),
        "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "PJRT_DEVICE")},
        "torch_xla_imported_before_script": torch_xla_before,
        "device": str(device),
        "sum": value.cpu().item(),
    }
    with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "aws-era.json"), "w") as f:
        json.dump(record, f)


def _mp_fn(index):
    main()


if __name__ == "__main__":
    main()

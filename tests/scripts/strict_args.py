"""A script with a strict argument parser (as HfArgumentParser and argparse's parse_args are): an argument it
does not know, such as --sagemaker_training_compiler_enabled, stops it. Records how it was run."""

import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
args = parser.parse_args()
with open("/proc/1/cmdline", "rb") as f:
    pid1 = f.read().split(b"\0")[0].decode()
record = {"argv": sys.argv[1:], "epochs": args.epochs, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE"),
          "torch_xla_imported": "torch_xla" in sys.modules, "pid1": pid1}
with open(os.path.join(os.environ["SM_MODEL_DIR"], "strict-args.json"), "w") as f:
    json.dump(record, f)

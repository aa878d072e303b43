"""A worker that trains "forever": records its pid, writes a checkpoint, then waits.

--on_sigterm save: the documented graceful pattern (a SIGTERM handler that saves and exits).
--on_sigterm ignore: a worker that ignores SIGTERM, so only SIGKILL ends it.
--on_sigterm default: whatever the launcher does by default (finally blocks run).
--crash_rank N: the worker of that rank raises after a moment.
"""

import argparse
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--on_sigterm", default="default", choices=["default", "save", "ignore"])
p.add_argument("--crash_rank", type=int, default=-1)
args = p.parse_args()
rank = int(os.environ.get("RANK", "0"))
model_dir = os.environ["SM_MODEL_DIR"]
ckpt_dir = os.environ.get("SM_CHECKPOINT_DIR", os.path.join(os.path.dirname(model_dir), "checkpoints"))
os.makedirs(ckpt_dir, exist_ok=True)


def mark(name, text=""):
    with open(os.path.join(model_dir, f"{name}-rank{rank}"), "w") as f:
        f.write(text)


if args.on_sigterm == "save":
    def on_sigterm(signum, frame):
        mark("sigterm")
        with open(os.path.join(ckpt_dir, f"final-rank{rank}.ckpt"), "w") as f:
            f.write("saved on SIGTERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_sigterm)
elif args.on_sigterm == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

with open(os.path.join(ckpt_dir, f"step-100-rank{rank}.ckpt"), "w") as f:
    f.write("weights at step 100")
with open(os.path.join(model_dir, f"partial-rank{rank}.bin"), "w") as f:
    f.write("model so far")
mark("pid", str(os.getpid()))
try:
    if rank == args.crash_rank:
        time.sleep(1.0)
        raise RuntimeError(f"rank {rank} hit a NaN loss")
    time.sleep(600)
finally:
    if args.on_sigterm == "default":
        mark("finally")

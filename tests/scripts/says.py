"""Prints what it is told to, then ends as it is told: for what the toolkit reads in a script's output and does
after the script.

--lines JSON          a list of lines to print (stdout)
--blank_loss_line N   also print the word "loss" followed by N blanks and no number
--scratch_files N     leave N empty files in the run's scratch folder (where its error record goes), which the
                      toolkit removes after the verdict; the folder's path is written to model/scratch.txt
--then exit|sleep     end (with --exit_code) or wait to be stopped; model/ready is written first either way
"""

import argparse
import json
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--lines", default="[]")
p.add_argument("--blank_loss_line", type=int, default=0)
p.add_argument("--scratch_files", type=int, default=0)
p.add_argument("--then", choices=["exit", "sleep"], default="exit")
p.add_argument("--exit_code", type=int, default=0)
args = p.parse_args()
model = os.environ["SM_MODEL_DIR"]

for line in json.loads(args.lines):
    print(line, flush=True)
if args.blank_loss_line:
    print("loss" + " " * args.blank_loss_line, flush=True)
if args.scratch_files:
    scratch = os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"])
    crowd = os.path.join(scratch, "crowd")
    os.makedirs(crowd)
    for i in range(args.scratch_files):
        open(os.path.join(crowd, str(i)), "w").close()
    with open(os.path.join(model, "scratch.txt"), "w") as f:
        f.write(scratch)
with open(os.path.join(model, "ready"), "w") as f:
    f.write(str(os.getpid()))
if args.then == "sleep":
    time.sleep(600)
sys.exit(args.exit_code)

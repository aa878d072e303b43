"""Writes a verdict file itself, as some scripts do, and then ends the other way.

--case failure_then_exit0: writes output/failure, then exits 0.
--case success_then_crash: writes output/success, then raises.
"""

import argparse
import os

p = argparse.ArgumentParser()
p.add_argument("--case", choices=["failure_then_exit0", "success_then_crash"], required=True)
args = p.parse_args()
output = os.environ["SM_OUTPUT_DIR"]
if args.case == "failure_then_exit0":
    with open(os.path.join(output, "failure"), "w") as f:
        f.write("my own reason: the validation accuracy stayed at 0.1")
else:
    with open(os.path.join(output, "success"), "w") as f:
        f.write("epoch 3 done")
    raise RuntimeError("the upload after training failed")

"""Starts a process that outlives the script (a real orphan) and ends."""
import os
import subprocess

child = subprocess.Popen(["sleep", "600"])
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "orphan.pid"), "w") as f:
    f.write(str(child.pid))

"""Starts a process that ends by itself a moment after the worker has ended, as a DataLoader worker does once it
sees its parent gone (or a spawned child still tearing down its memory under load): not one left behind."""
import os
import subprocess
import sys

WATCH = """
import os, sys, time
parent = int(sys.argv[1])
while os.getppid() == parent:   # until the worker that started it has ended
    time.sleep(0.05)
time.sleep(1.0)
"""
subprocess.Popen([sys.executable, "-c", WATCH, str(os.getpid())])

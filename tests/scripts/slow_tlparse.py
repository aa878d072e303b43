#!/usr/bin/env python3
"""Stands in for a tlparse that takes minutes over a large trace (OPENTC_TLPARSE points here): says it started, in
the folder it was asked to write (-o), then works for ten minutes."""
import os
import sys
import time

target = sys.argv[sys.argv.index("-o") + 1]
os.makedirs(target, exist_ok=True)
with open(os.path.join(target, "started"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)

"""Fails the way a buggy script does: an exception deep in the call stack."""

import sys


def load_batch(step):
    raise ValueError(f"batch {step} has 3 columns, expected 4")


print("about to fail", file=sys.stderr, flush=True)
load_batch(7)

"""Fails with a message holding a file name that is not UTF-8, read back with os.listdir (a lone surrogate)."""

import os

folder = os.path.join(os.environ["SM_MODEL_DIR"], "inputs")
os.makedirs(folder, exist_ok=True)
open(os.path.join(os.fsencode(folder), b"caf\xe9.csv"), "wb").close()   # a latin-1 name, as old tools write
name = os.listdir(folder)[0]                                            # 'caf\udce9.csv'
raise ValueError("cannot parse " + name)

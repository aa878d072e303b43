"""Written for xla_spawn: defines _mp_fn(index) and has no __main__ block."""

import json
import os
import sys


def _mp_fn(index):
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "mp_fn.json"), "w") as f:
        json.dump({"index": index, "argv": sys.argv[1:]}, f)

"""Records which heavy modules were imported before the script's first line, and sets a variable torch reads at
import (a script's right, as long as nothing imported torch first)."""

import json
import os
import sys

before = {name: name in sys.modules for name in ("torch", "torch._dynamo", "torch_xla")}
os.environ["OMP_NUM_THREADS"] = "1"
import torch  # noqa: E402

with open(os.path.join(os.environ["SM_MODEL_DIR"], "imports.json"), "w") as f:
    json.dump({"before": before, "threads": torch.get_num_threads()}, f)

"""Writes the argv it received, so a test can see exactly what arrived."""

import json
import os
import sys

with open(os.path.join(os.environ["SM_MODEL_DIR"], "argv.json"), "w") as f:
    json.dump(sys.argv[1:], f)

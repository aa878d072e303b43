"""How a message names a setting its reader can change.

The launcher says its own words: an option with its value (`--cpu-multi-worker unsynchronized`) or a variable
(`TORCH_LOGS=graph_breaks`). A front end that starts it under names of its own (the SageMaker toolkit: hyperparameters)
hands those down in OPENTC_SETTING_NAMES, a JSON object from the launcher's words to its own, so that the same message
tells a SageMaker user which hyperparameter to set and someone running opentc-run which option. The launcher itself
names no front end's settings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

VARIABLE = "OPENTC_SETTING_NAMES"


def setting(words: str, env: Mapping[str, str] = os.environ) -> str:
    """`words` as the front end that started this launcher calls that setting, else as they are."""
    try:
        names = json.loads(env.get(VARIABLE) or "{}")
    except ValueError:
        return words
    found = names.get(words) if isinstance(names, dict) else None
    return found if isinstance(found, str) and found else words

"""A true/false hyperparameter, read one way wherever the toolkit reads one (job_settings.py, distributions.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentc_launcher.common import flag

from .not_started import BadInput
from .quoted import quoted


def boolean(params: Mapping[str, Any], key: str, default: bool) -> bool:
    """A flag as the SDK ("true" JSON-encoded, read back as a boolean) or CreateTrainingJob sends it."""
    if key not in params:
        return default
    value = params[key]
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and flag(value) is not None:
        return bool(flag(value))
    raise BadInput(
        f"hyperparameter {key} has the value {quoted(value)}, which is not accepted: use \"true\" or \"false\" "
        f"(a JSON boolean, as the SageMaker SDK writes it, or that string in any letter case).")

"""How every message of the toolkit's quotes a hyperparameter's value: as JSON, the way the SDK writes it in
hyperparameters.json (true, 3, "abc", ["a"]), shortened when long, so that what is accepted, which follows it, stays
within the 1,024 characters SageMaker shows."""

from __future__ import annotations

import json

from opentc_launcher.common import printable

LIMIT = 60


def quoted(value: object) -> str:
    """`value` as JSON ("'7777...' (5000 characters)" past LIMIT); text that is not UTF-8 comes escaped."""
    try:
        text = printable(json.dumps(value, ensure_ascii=False, default=repr))
    except (ValueError, RecursionError):   # an int past Python's 4,300 digits, a list nested past its stack
        return "(a number too large to show)" if isinstance(value, int) else "(a value too large to show)"
    if len(text) <= LIMIT:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as written"
    return f"{text[:LIMIT - 20]}... ({size})"

"""Small utilities the launcher and its front ends share, with no launch in them: reading a value from the
environment or a setting (env_values), text for a message (text), writing a file whole (files), and the process
controls a supervisor needs (process). The launch contract itself is opentc_launcher.api; tests/test_layers.py holds
the toolkit and the image's build scripts to these two modules."""

from .env_values import MAX_DIGITS, MAX_PORT, BadEnvironmentValue, flag, number_from_env, whole_number
from .files import unwritable, write_json
from .installed import version as installed_version
from .process import PR_SET_CHILD_SUBREAPER, die_with_parent, prctl
from .text import printable, tail

__all__ = [
    "MAX_DIGITS",
    "MAX_PORT",
    "PR_SET_CHILD_SUBREAPER",
    "BadEnvironmentValue",
    "die_with_parent",
    "flag",
    "installed_version",
    "number_from_env",
    "prctl",
    "printable",
    "tail",
    "unwritable",
    "whole_number",
    "write_json",
]

"""How a message names a setting its reader can change.

The launcher says its own words: an option with its value (`--cpu-multi-worker unsynchronized`) or a variable
(`TORCH_LOGS=graph_breaks`). Each setting a message names is a `Setting` constant, made where the module that names it
is (`option_setting` refuses an option that does not exist when the module is imported; mypy refuses plain text).

A front end that starts the launcher under names of its own (the SageMaker toolkit: hyperparameters) hands those down
in OPENTC_SETTING_NAMES, a JSON object with two parts:

    "options": {a worker option's name: the front end's name for it}
               `--library-patches false` is then worded `<name>=false`, `--defaults-off regional` `<name>="regional"`,
               and `--max-compilations` (the option, no value) `hyperparameter <name>`;
    "phrases": {the launcher's words: the front end's}, for the rest (an opentc-run option, a backend, a variable).

so that the same message tells a SageMaker user which hyperparameter to set and someone running opentc-run which
option. The launcher itself names no front end's settings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from .options import FLAG, declared_options

VARIABLE = "OPENTC_SETTING_NAMES"


@dataclass(frozen=True)
class Setting:
    """A setting a message tells its reader to change."""

    words: str                 # the launcher's own: "--library-patches false", "TORCH_LOGS=graph_breaks"
    option: str = ""           # the worker option it sets (a WorkerOptions field), else ""
    value: str | None = None   # the value it names; None for the option itself ("--max-compilations")


def option_setting(name: str, value: str | None = None) -> Setting:
    """A worker option, with a value or as itself; ValueError for a name WorkerOptions does not declare."""
    declared = [option for option, _, _ in declared_options()]
    if name not in declared:
        raise ValueError(f"{name!r} is not a worker option (opentc_launcher.options): {', '.join(declared)}")
    words = f"--{name.replace('_', '-')}"
    return Setting(words if value is None else f"{words} {value}", option=name, value=value)


ONE_WORKER_PER_HOST = Setting("--nproc-per-node 1")   # opentc-run's option, not a worker's
COMPILER_OFF = option_setting("backend", "eager")
MAX_COMPILATIONS = option_setting("max_compilations")
WARMUP_STEPS = option_setting("warmup_steps")
DEFAULTS_OFF = option_setting("defaults_off")


def _names(env: Mapping[str, str]) -> tuple[dict, dict]:
    try:
        names = json.loads(env.get(VARIABLE) or "{}")
    except ValueError:
        return {}, {}
    if not isinstance(names, dict):
        return {}, {}
    options, phrases = names.get("options"), names.get("phrases")
    return (options if isinstance(options, dict) else {}), (phrases if isinstance(phrases, dict) else {})


def setting(named: Setting, env: Mapping[str, str] = os.environ) -> str:
    """`named` as the front end that started this launcher calls that setting, else in the launcher's words."""
    options, phrases = _names(env)
    own = options.get(named.option)
    if isinstance(own, str) and own:
        if named.value is None:
            return f"hyperparameter {own}"
        kind = next(declared.kind for name, declared, _ in declared_options() if name == named.option)
        return f"{own}={named.value}" if kind == FLAG else f"{own}={json.dumps(named.value)}"
    found = phrases.get(named.words)
    return found if isinstance(found, str) and found else named.words

"""Training Compiler settings from the job's hyperparameters."""

from __future__ import annotations

import importlib.metadata as metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from opentc_launcher.api import (
    CHOICE,
    COMPILER_NAMES,
    COMPILER_OFF,
    FLAG,
    NAMES,
    ONE_WORKER_PER_HOST,
    WHOLE,
    XLA_IMAGE_VARIABLE,
    CompilerBackend,
    WorkerOptions,
    backend_named,
    debug_logs,
    default_compiler,
    defaults_off_problem,
    off_names,
    option_setting,
    settable_options,
    why_default,
)
from opentc_launcher.common import MAX_DIGITS, whole_number

from .distributions import XLA_MULTI_WORKER, Distribution, read_distribution
from .flags import boolean as _boolean
from .not_started import BadInput
from .quoted import quoted

MULTI_WORKER = XLA_MULTI_WORKER
COMPILER_PREFIX = "sagemaker_training_compiler_"
FOLDER = "folder"   # a hyperparameter's kind beside the worker options' (opentc_launcher.options): an absolute folder


@dataclass(frozen=True)
class JobSetting:
    """A setting of the job's own, not a worker option (those are WorkerOptions' fields, declared in the launcher),
    declared once: its hyperparameter (the prefix and `name`), the JobSettings attribute it fills, how its value is
    parsed (`kind`: FLAG, CHOICE of `choices`, FOLDER), and its row in the docs' table (settings_table): the default
    column as written, and what it does."""

    name: str
    attribute: str
    kind: str
    default_cell: str
    doc: str
    choices: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return COMPILER_PREFIX + self.name


JOB_SETTINGS = (
    JobSetting("enabled", "enabled", FLAG,
               '`false`',
               '`true`: the compiler that `sagemaker_training_compiler_backend` names. `false`: plain PyTorch with '
               '`USE_TORCH_XLA=0`, so transformers and accelerate do not take the XLA device, and torch_xla is '
               'never imported'),
    JobSetting("backend", "compiler_name", CHOICE,
               'the image\'s own: `"xla"` where torch-xla is installed, else `"inductor"`',
               '`"xla"`: PyTorch/XLA (`PJRT_DEVICE=CUDA` with GPUs, `CPU` without; `USE_TORCH_XLA=1`), as AWS\'s '
               'Training Compiler. `"inductor"`: torch.compile with TorchInductor (plain PyTorch processes, '
               '`USE_TORCH_XLA=0`, `ACCELERATE_DYNAMO_BACKEND=inductor`; see [Choosing the '
               'compiler](compilers.md#choosing-the-compiler-xla-or-inductor)). Anything else stops the job (exit '
               'code 2, naming both), and so does a compiler the image does not have (naming the image that has '
               'it)', choices=COMPILER_NAMES),
    JobSetting("cache", "cache", FLAG,
               '`true`',
               'persistent compilation cache (see [Diagnostics and the compilation '
               'cache](diagnostics-and-cache.md))'),
    JobSetting("cache_dir", "cache_dir", FOLDER,
               '`/opt/ml/checkpoints/compile-cache`',
               'where the cache lives: a folder per compiler, version and device below it'),
)
_JOB_KEYS = {setting.name: setting.key for setting in JOB_SETTINGS}
ENABLED, BACKEND, CACHE, CACHE_DIR = (_JOB_KEYS[name] for name in ("enabled", "backend", "cache", "cache_dir"))
# The worker options a job sets by hyperparameter, each declared once with the launcher's option
# (opentc_launcher.options.WorkerOptions, with a `setting`): its key is the prefix and the option's name; its default,
# parsing and row in the docs' table (settings_table) are the declaration's; JobSettings.worker holds its value.
_WORKER_OPTIONS = settable_options()   # (name, declaration, default)
WORKER_SETTINGS = {name: COMPILER_PREFIX + name for name, _, _ in _WORKER_OPTIONS}
CPU_MULTI_WORKER = WORKER_SETTINGS["cpu_multi_worker"]
MAX_COMPILATIONS = WORKER_SETTINGS["max_compilations"]
LIBRARY_PATCHES = WORKER_SETTINGS["library_patches"]
DEFAULTS_OFF = WORKER_SETTINGS["defaults_off"]
DEBUG = WORKER_SETTINGS["debug_mode"]

# The launcher's words for a setting, as a SageMaker job sets it (opentc_launcher.setting_names): handed down to the
# launcher and its workers, so their messages name the hyperparameter to change. A worker option is named by its
# hyperparameter (WORKER_SETTINGS); the other words it may say are these.
_DEBUG_MODE = f"debug mode ({DEBUG}=true)"
PHRASES = MappingProxyType({
    ONE_WORKER_PER_HOST.words: f"{MULTI_WORKER}=false",   # or the key that asked for the workers: setting_names()
    COMPILER_OFF.words: f"{ENABLED}=false",
    **{option_setting("backend", name).words: f'{BACKEND}="{name}"' for name in COMPILER_NAMES},
    **{log.words: _DEBUG_MODE for log in debug_logs()},
})

# Every key in the compiler's namespace: another one there is most likely a typo.
COMPILER_KEYS = (*_JOB_KEYS.values(), *WORKER_SETTINGS.values())


def _choice(params: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = params.get(key, default)
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    raise BadInput(f"hyperparameter {key} has the value {quoted(value)}, which is not accepted: use one of "
                         + ", ".join(f'"{c}"' for c in choices) + ".")


def _whole_number(params: Mapping[str, Any], key: str, default: int) -> int:
    value = params.get(key, default)
    number = None if isinstance(value, bool) or not isinstance(value, (int, str)) else whole_number(str(value))
    if number is None:
        raise BadInput(f"hyperparameter {key} has the value {quoted(value)}, which is not accepted: use a whole "
                             f"number >= 0 in digits 0-9, at most {MAX_DIGITS} of them (0 means no limit).")
    return number


def _names(params: Mapping[str, Any], key: str) -> str:
    """A comma-separated list of compile-time defaults (a JSON list of strings is accepted too), each one some backend
    has: checked here, whatever the backend and with the compiler off, so a value gets one answer everywhere."""
    value = params.get(key, "")
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str) or any(c in value for c in "\0\n"):
        raise BadInput(f"hyperparameter {key} has the value {quoted(value)}, which is not accepted: use a "
                       f"comma-separated list of names, e.g. \"regional,vec_isa\", or \"all\".")
    problem = defaults_off_problem(value, f"hyperparameter {key}")
    if problem:
        raise BadInput(problem)
    return ",".join(off_names(value))


def _parsed(params: Mapping[str, Any], key: str, kind: str, choices: tuple[str, ...], default: Any) -> Any:
    """A hyperparameter, parsed as its declaration's kind says (one parser per kind, for the job's settings and the
    worker options alike); refused (BadInput) with what is accepted."""
    if kind == CHOICE:
        return _choice(params, key, choices, default)
    if kind == FLAG:
        return _boolean(params, key, default)
    if kind == WHOLE:
        return _whole_number(params, key, default)
    if kind == NAMES:
        return _names(params, key)
    if kind == FOLDER:
        return _folder(params, key)
    raise TypeError(f"hyperparameter {key} is declared {kind!r}: no hyperparameter parsing for that kind")


def _folder(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key, "")
    if not isinstance(value, str) or (value and not os.path.isabs(value)):
        raise BadInput(f"hyperparameter {key} has the value {quoted(value)}, which is not accepted: "
                             f"use an absolute folder path inside the container, "
                             f"e.g. \"/opt/ml/checkpoints/xla-cache\".")
    return value


@dataclass(frozen=True)
class JobSettings:
    enabled: bool = False
    # The compiler the job chose (xla or inductor); it runs only when enabled: backend_name says what runs.
    compiler_name: str = field(default_factory=default_compiler)
    compiler_named: bool = False  # whether the job named it; else it is this image's default
    # One worker per host, or one per device and why (distributions.py).
    distribution: Distribution = Distribution.NONE
    # What asked for several workers: hyperparameters (distributions.py) or an SDK's words, for messages.
    multi_worker_asked_by: tuple[str, ...] = ()
    # How the image runs the distribution that was asked for, when that differs from what AWS's containers did.
    distribution_notes: tuple[str, ...] = ()
    cache: bool = True
    cache_dir: str = ""          # empty: the default under the checkpoints folder
    # The worker options the job sets by hyperparameter (WORKER_SETTINGS), the others at their defaults: declared,
    # with their defaults and meaning, by the launcher (opentc_launcher.options.WorkerOptions).
    worker: WorkerOptions = field(default_factory=WorkerOptions)

    @property
    def debug(self) -> bool:
        """Whether the job asked for debug mode (the workers get it only with the compiler on: plan.worker_options)."""
        return self.worker.debug_mode

    @property
    def multi_worker(self) -> bool:
        """Whether each host runs a worker per device (through opentc-run) rather than one."""
        return self.distribution is not Distribution.NONE

    @property
    def backend_name(self) -> str:
        """The backend the workers run: the compiler chosen, or eager (plain PyTorch) with the compiler off."""
        return self.compiler_name if self.enabled else "eager"

    @property
    def backend(self) -> CompilerBackend:
        """The backend that runs (plain PyTorch's with the compiler off)."""
        return backend_named(self.backend_name)

    @classmethod
    def from_hyperparameters(cls, params: Mapping[str, Any],
                             script_params: Mapping[str, Any] = MappingProxyType({})) -> JobSettings:
        """From the job's sagemaker_* hyperparameters (`params`); `script_params`, the script's own, show a
        distribution the SDK sends outside that namespace (distributions.py)."""
        distribution = read_distribution(params, script_params)
        unknown = sorted(k for k in params if k.startswith(COMPILER_PREFIX) and k not in COMPILER_KEYS)
        if unknown:
            raise BadInput(f"unknown hyperparameter {unknown[0]}: the Training Compiler accepts "
                                 + ", ".join(COMPILER_KEYS) + ".")
        defaults = cls()   # the backend's default: the image's own compiler (xla where torch-xla is installed)
        return cls(
            **{s.attribute: _parsed(params, s.key, s.kind, s.choices, getattr(defaults, s.attribute))
               for s in JOB_SETTINGS},
            compiler_named=BACKEND in params,
            distribution=distribution.distribution,
            multi_worker_asked_by=distribution.asked_by,
            distribution_notes=distribution.notes,
            worker=WorkerOptions(**{name: _parsed(params, WORKER_SETTINGS[name], declared.kind, declared.choices,
                                                  default) for name, declared, default in _WORKER_OPTIONS}),
        )

    def values(self) -> dict[str, Any]:
        """Each hyperparameter's value in these settings, by its key, in COMPILER_KEYS' order (the dry run's)."""
        return {**{s.key: getattr(self, s.attribute) for s in JOB_SETTINGS},
                **{key: getattr(self.worker, name) for name, key in WORKER_SETTINGS.items()}}


    def setting_names(self) -> dict[str, dict[str, str]]:
        """The hyperparameters' names for the launcher's settings (OPENTC_SETTING_NAMES), with what asked for several
        workers as what to turn off for one."""
        phrases = dict(PHRASES)
        if self.multi_worker_asked_by:
            phrases[ONE_WORKER_PER_HOST.words] = " and ".join(
                f"{asked}=false" if asked.startswith("sagemaker_") else f"no {asked}"
                for asked in self.multi_worker_asked_by)
        return {"options": dict(WORKER_SETTINGS), "phrases": phrases}

    def backend_note(self) -> str:
        """How the compiler was chosen, for the log."""
        if self.compiler_named:
            return f"{BACKEND}={self.compiler_name}"
        return f"{BACKEND} not set: {self.compiler_name} ({why_default(self.compiler_name)})"

    def check_installed(self, env: Mapping[str, str]) -> None:
        """Refuse a compiler this image does not have (XLA in the inductor image), before anything runs."""
        missing = self.backend.missing() if self.enabled else None
        if not missing:
            return
        here = default_compiler()
        tag = env.get(XLA_IMAGE_VARIABLE, "").strip()
        elsewhere = f"the xla image (tag {tag})" if tag and self.compiler_name == "xla" else "an image that has it"
        raise BadInput(
            f'hyperparameter {BACKEND}="{self.compiler_name}" cannot run in this image: {missing} (this image has '
            f'torch {metadata.version("torch").split("+")[0]}). For {self.backend.title}, use {elsewhere}; here, leave '
            f'{BACKEND} unset or set it to "{here}" to compile with {backend_named(here).title}.')

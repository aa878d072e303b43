"""Training Compiler settings from the job's hyperparameters, and the XLA environment they call for."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from opentc_launcher.options import CPU_MULTI_WORKER_POLICIES

from .errors import JobConfigError

ENABLED = "sagemaker_training_compiler_enabled"
DEBUG = "sagemaker_training_compiler_debug_mode"
MULTI_WORKER = "sagemaker_pytorch_xla_multi_worker_enabled"
CPU_MULTI_WORKER = "sagemaker_training_compiler_cpu_multi_worker"
CACHE = "sagemaker_training_compiler_cache"
CACHE_DIR = "sagemaker_training_compiler_cache_dir"
MAX_COMPILATIONS = "sagemaker_training_compiler_max_compilations"
LIBRARY_PATCHES = "sagemaker_training_compiler_library_patches"

# Every key in the compiler's namespace: another one there is most likely a typo.
COMPILER_KEYS = (ENABLED, DEBUG, CPU_MULTI_WORKER, CACHE, CACHE_DIR, MAX_COMPILATIONS, LIBRARY_PATCHES)
COMPILER_PREFIX = "sagemaker_training_compiler_"


def _boolean(params: Mapping[str, Any], key: str, default: bool) -> bool:
    """A flag as the SDK ("true" JSON-encoded, read back as a boolean) or CreateTrainingJob sends it."""
    if key not in params:
        return default
    value = params[key]
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise JobConfigError(
        f"hyperparameter {key} has the value {value!r}, which is not accepted: use \"true\" or \"false\" "
        f"(a JSON boolean, as the SageMaker SDK writes it, or that string in any letter case).")


def _choice(params: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = params.get(key, default)
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    raise JobConfigError(f"hyperparameter {key} has the value {value!r}, which is not accepted: use one of "
                         + ", ".join(f'"{c}"' for c in choices) + ".")


def _whole_number(params: Mapping[str, Any], key: str, default: int) -> int:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise JobConfigError(f"hyperparameter {key} has the value {value!r}, which is not accepted: "
                             f"use a whole number >= 0 (0 means no limit).")
    return int(value)


def _folder(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key, "")
    if not isinstance(value, str) or (value and not os.path.isabs(value)):
        raise JobConfigError(f"hyperparameter {key} has the value {value!r}, which is not accepted: "
                             f"use an absolute folder path inside the container, "
                             f"e.g. \"/opt/ml/checkpoints/xla-cache\".")
    return value


@dataclass(frozen=True)
class CompilerSettings:
    enabled: bool = False
    debug: bool = False
    multi_worker: bool = False
    cpu_multi_worker: str = "refuse"
    cache: bool = True
    cache_dir: str = ""          # empty: the default under the checkpoints folder
    max_compilations: int = 0    # 0: no limit
    library_patches: bool = True  # opentc_launcher.library_patches on XLA runs

    @classmethod
    def from_hyperparameters(cls, params: Mapping[str, Any]) -> CompilerSettings:
        unknown = sorted(k for k in params if k.startswith(COMPILER_PREFIX) and k not in COMPILER_KEYS)
        if unknown:
            raise JobConfigError(f"unknown hyperparameter {unknown[0]}: the Training Compiler accepts "
                                 + ", ".join(COMPILER_KEYS) + f" and {MULTI_WORKER}.")
        return cls(
            enabled=_boolean(params, ENABLED, False),
            debug=_boolean(params, DEBUG, False),
            multi_worker=_boolean(params, MULTI_WORKER, False),
            cpu_multi_worker=_choice(params, CPU_MULTI_WORKER, CPU_MULTI_WORKER_POLICIES, "refuse"),
            cache=_boolean(params, CACHE, True),
            cache_dir=_folder(params, CACHE_DIR),
            max_compilations=_whole_number(params, MAX_COMPILATIONS, 0),
            library_patches=_boolean(params, LIBRARY_PATCHES, True),
        )


@dataclass(frozen=True)
class EnvironmentChanges:
    """What the compiler wants in the workers' environment, and what the user had already decided."""

    applied: Mapping[str, str]
    kept: Mapping[str, str]          # name -> the value the user set (which stays)


def debug_environment(folder: str) -> dict[str, str]:
    """torch-xla's debug and dump switches, with every artefact under `folder`."""
    return {
        "PT_XLA_DEBUG_LEVEL": "1",           # compilation analysis: why each graph was compiled
        "XLA_IR_DEBUG": "1",                 # Python frames in the IR ...
        "XLA_HLO_DEBUG": "1",                # ... and in the HLO metadata
        "XLA_SAVE_TENSORS_FILE": os.path.join(folder, "XLA_SAVE_TENSORS_FILE.hlo"),
        "XLA_SAVE_TENSORS_FMT": "hlo",
        "XLA_METRICS_FILE": os.path.join(folder, "XLA_METRICS_FILE.txt"),
        "XLA_DUMP_FATAL_STACK": "1",
        "XLA_FLAGS": f"--xla_dump_to={os.path.join(folder, 'xla_dump')}",
    }


def compiler_environment(settings: CompilerSettings, *, gpu_count: int, compiler_output: str,
                         base_env: Mapping[str, str]) -> EnvironmentChanges:
    """The variables the workers need; a variable the user already set is kept, never overridden.

    The PJRT device is not one of them: the launch plan decides it (opentc_launcher.decision).
    """
    wanted: dict[str, str]
    if settings.enabled:
        wanted = {"USE_TORCH_XLA": "1"}
        if gpu_count > 0:
            wanted["GPU_NUM_DEVICES"] = str(gpu_count)
        if settings.debug:
            wanted.update(debug_environment(compiler_output))
    else:
        # transformers and accelerate take the XLA device whenever torch_xla imports, unless told not to.
        wanted = {"USE_TORCH_XLA": "0"}
    kept = {k: base_env[k] for k in wanted if k in base_env and base_env[k] != wanted[k]}
    applied = {k: v for k, v in wanted.items() if k not in base_env}
    return EnvironmentChanges(applied=MappingProxyType(applied), kept=MappingProxyType(kept))

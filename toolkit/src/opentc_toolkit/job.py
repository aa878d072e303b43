"""The job SageMaker wrote under /opt/ml (or $SAGEMAKER_BASE_DIR), read once into a frozen description.

Reading is sagemaker-training's: it decodes hyperparameters.json (every value JSON-encoded, a value that
does not decode kept as the raw string), splits the `sagemaker_*` keys from the script's, and builds the
SM_* variables and the script's argv. This module only freezes what it found.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Optional

from .errors import JobConfigError


@dataclass(frozen=True)
class JobPaths:
    base: str
    code: str
    model: str
    output: str
    output_data: str
    checkpoints: str
    input_config: str

    @classmethod
    def under(cls, base: str) -> "JobPaths":
        return cls(
            base=base,
            code=os.path.join(base, "code"),
            model=os.path.join(base, "model"),
            output=os.path.join(base, "output"),
            output_data=os.path.join(base, "output", "data"),
            checkpoints=os.path.join(base, "checkpoints"),
            input_config=os.path.join(base, "input", "config"),
        )

    @property
    def failure_file(self) -> str:
        return os.path.join(self.output, "failure")

    @property
    def success_file(self) -> str:
        return os.path.join(self.output, "success")

    @property
    def compiler_output(self) -> str:
        """Compiler artefacts: under output/data so SageMaker puts them in output.tar.gz."""
        return os.path.join(self.output_data, "compiler")


@dataclass(frozen=True)
class TrainingJob:
    paths: JobPaths
    entry_point: Optional[str]              # sagemaker_program
    submit_directory: str                   # sagemaker_submit_directory, or the code folder
    hyperparameters: Mapping[str, Any]      # the script's own (no sagemaker_ keys)
    framework_params: Mapping[str, Any]     # sagemaker_* keys that are not sagemaker-training's own
    user_args: tuple[str, ...]              # the script's argv: --key value, keys sorted
    hosts: tuple[str, ...]
    current_host: str
    num_gpus: int
    num_cpus: int
    channels: Mapping[str, str]             # channel name -> folder
    script_env: Mapping[str, str]           # SM_* variables for the script
    log_level: int = 20

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def is_multi_host(self) -> bool:
        return len(self.hosts) > 1


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


def read_job() -> TrainingJob:
    """Read the job folder that sagemaker-training points at ($SAGEMAKER_BASE_DIR, else /opt/ml)."""
    from sagemaker_training import environment

    try:
        env = environment.Environment()
    except FileNotFoundError as e:
        raise JobConfigError(
            f"job file missing: {e.filename}. A job folder needs input/config/hyperparameters.json, "
            f"input/config/resourceconfig.json and input/config/inputdataconfig.json.") from None
    except (json.JSONDecodeError, KeyError) as e:
        raise JobConfigError(f"job files under {environment.input_config_dir} cannot be read: "
                             f"{type(e).__name__}: {e}") from None

    hosts = tuple(env.hosts)
    if env.current_host not in hosts:
        raise JobConfigError(f"resourceconfig.json: current_host {env.current_host!r} is not one of "
                             f"hosts {list(hosts)}")
    return TrainingJob(
        paths=JobPaths.under(environment.base_dir),
        entry_point=env.user_entry_point or None,
        submit_directory=env.module_dir,
        hyperparameters=_frozen(env.hyperparameters),
        framework_params=_frozen(env.additional_framework_parameters),
        user_args=tuple(str(a) for a in env.to_cmd_args()),
        hosts=hosts,
        current_host=env.current_host,
        num_gpus=env.num_gpus,
        num_cpus=env.num_cpus,
        channels=_frozen(env.channel_input_dirs),
        script_env=_frozen(env.to_env_vars()),
        log_level=int(env.log_level),
    )

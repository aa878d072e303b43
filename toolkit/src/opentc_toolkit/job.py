"""The job SageMaker wrote under /opt/ml (or $SAGEMAKER_BASE_DIR), read once into a frozen description.

The three job files are read and checked here first, so that a missing or malformed one is a clear
"Training not started" naming the file. Only then does sagemaker-training's `Environment` build, from what
was read, what it is the reference for: the decoded hyperparameters, the `sagemaker_*` split, the SM_*
variables and the script's argv.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from opentc_launcher.api import HostFacts, probe_host
from opentc_launcher.common import printable

from .job_files import MiB, read_regular
from .job_settings import JobSettings
from .not_started import BadInput

log = logging.getLogger(__name__)

HYPERPARAMETERS = "hyperparameters.json"
RESOURCE_CONFIG = "resourceconfig.json"
INPUT_DATA_CONFIG = "inputdataconfig.json"
# SageMaker's own are a few KB (at most 100 hyperparameters of 2,500 characters each); past this, none is a job file.
MAX_JOB_FILE_BYTES = 4 * MiB


@dataclass(frozen=True)
class JobPaths:
    base: str

    @property
    def code(self) -> str:
        return os.path.join(self.base, "code")

    @property
    def model(self) -> str:
        return os.path.join(self.base, "model")

    @property
    def output(self) -> str:
        return os.path.join(self.base, "output")

    @property
    def output_data(self) -> str:
        return os.path.join(self.output, "data")

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.base, "checkpoints")

    @property
    def input_config(self) -> str:
        return os.path.join(self.base, "input", "config")

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
    """The job, as its files describe it (read_job); adapters at the edge turn a job that some launcher or SDK laid
    out its own way into what really runs (AdaptedJob)."""

    paths: JobPaths
    entry_point: str | None              # sagemaker_program (or SAGEMAKER_PROGRAM)
    submit_directory: str                   # sagemaker_submit_directory, or the code folder
    hyperparameters: Mapping[str, Any]      # the script's own (no sagemaker_ keys)
    framework_params: Mapping[str, Any]     # sagemaker_* keys that are not sagemaker-training's own
    user_args: tuple[str, ...]              # the script's argv: --key value, keys sorted
    hosts: tuple[str, ...]
    current_host: str
    machine: HostFacts                      # probed once, as the job is read
    script_env: Mapping[str, str]           # SM_* variables for the script
    requirements_file: str = "requirements.txt"   # in the code folder, installed before the script runs
    code_submitted: bool = False          # whether sagemaker_submit_directory named the code
    workers_per_host: int | None = None   # what the job itself asks for (an adapter read it), else one per GPU
    workers_asked_by: str = ""            # where that number came from, in the words of whoever wrote it
    job_name: str | None = None           # SageMaker's TRAINING_JOB_NAME, or the hyperparameter sagemaker_job_name

    @property
    def num_gpus(self) -> int:
        return self.machine.gpus

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def is_multi_host(self) -> bool:
        return len(self.hosts) > 1


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


def _read_object(paths: JobPaths, name: str, expected: str) -> dict:
    """A job file that must hold a JSON object; BadInput naming the file and what it must hold."""
    path = os.path.join(paths.input_config, name)
    where = f"input/config/{name}"
    try:
        data = json.loads(read_regular(path, f"job file {where}", MAX_JOB_FILE_BYTES, expected).decode("utf-8"))
    except FileNotFoundError:
        raise BadInput(
            f"job file missing: {where} (looked for {path}); it must hold {expected}. SageMaker writes it; a "
            f"job folder run by hand needs input/config/{HYPERPARAMETERS}, {RESOURCE_CONFIG} and "
            f"{INPUT_DATA_CONFIG} (copy them from /opt/opentc/sample-job, or sample/job in the repository).") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"job file {where} cannot be read as JSON ({type(e).__name__}: {e}); it must "
                             f"hold {expected}.") from None
    if not isinstance(data, dict):
        raise BadInput(f"job file {where} holds a JSON {type(data).__name__}, not an object; it must "
                             f"hold {expected}.")
    return data


def _check_hyperparameter_names(raw: Mapping[str, Any]) -> None:
    """Keys become environment variable names (SM_HP_<KEY>) and command-line options; values travel on
    the command line and in SM_HPS. The operating system refuses '=' in a name and NUL anywhere."""
    for key, value in raw.items():
        if not key or "=" in key or "\0" in key:
            raise BadInput(
                f"hyperparameter name {key!r} is not accepted: a name becomes an environment variable "
                f"(SM_HP_<NAME>) and an option (--<name>), so it must be non-empty and hold neither '=' nor a "
                f"NUL character.")
        text = value if isinstance(value, str) else json.dumps(value)
        if "\0" in text or "\\u0000" in text:
            raise BadInput(f"hyperparameter {key} holds a NUL character, which no command line or "
                                 f"environment variable can carry: remove it.")
        if not _is_text(key):
            raise BadInput(f"hyperparameter name {printable(key)!r} holds an unpaired surrogate (a \\ud800 to "
                                 f"\\udfff escape with no partner), which is not text: use valid UTF-8.")


def _is_text(value: Any) -> bool:
    """Whether every string in a (decoded JSON) value is valid Unicode text: no unpaired surrogate, which no
    command line, environment variable or file written as UTF-8 can carry."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_is_text(k) and _is_text(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_is_text(v) for v in value)
    return True


# sagemaker-training's own keys that must be strings (a script name, a URI), as the SDK writes them.
STRING_KEYS = ("sagemaker_program", "sagemaker_submit_directory")


def _check_decoded_values(decoded: Mapping[str, Any]) -> None:
    for key, value in decoded.items():
        if not _is_text(value):
            shown = printable(json.dumps(value, ensure_ascii=False))[:80]
            raise BadInput(
                f"hyperparameter {key} holds an unpaired surrogate ({shown}: a \\ud800 to \\udfff escape with no "
                f"partner), which is not text: no command line or environment variable can carry it. Use valid "
                f"UTF-8 text.")
    for key in STRING_KEYS:
        if key in decoded and not isinstance(decoded[key], str):
            raise BadInput(
                f"hyperparameter {key} is {json.dumps(decoded[key])[:80]} (a JSON {_json_kind(decoded[key])}), "
                f"not a string: it must be a JSON-encoded string, as the SageMaker SDK writes it "
                f"(\"{key}\": \"\\\"train.py\\\"\").")


def _json_kind(value: Any) -> str:
    kinds = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def decode_hyperparameters(raw: Mapping[str, Any]) -> dict[str, Any]:
    """As sagemaker-training decodes them: every value JSON-decoded, else kept as it is."""
    decoded = {}
    for key, value in raw.items():
        try:
            decoded[key] = json.loads(value)
        except (TypeError, ValueError):
            decoded[key] = value
    return decoded


def _hosts(resource: Mapping[str, Any]) -> tuple[tuple[str, ...], str]:
    hosts, current = resource.get("hosts"), resource.get("current_host")
    where = f"input/config/{RESOURCE_CONFIG}"
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise BadInput(f"{where}: \"hosts\" is {hosts!r}; it must be a non-empty list of host names, "
                             f"e.g. [\"algo-1\"] (SageMaker lists every host of the job, in the same order "
                             f"on each).")
    if not isinstance(current, str) or current not in hosts:
        raise BadInput(f"{where}: \"current_host\" is {current!r}; it must be one of hosts {hosts}.")
    repeated = sorted({h for h in hosts if hosts.count(h) > 1})
    if repeated:
        raise BadInput(f"{where}: \"hosts\" names {repeated[0]!r} more than once ({hosts}); every host of the "
                             f"job must appear once, in the same order on each host.")
    return tuple(hosts), current


def read_job(paths: JobPaths) -> TrainingJob:
    """Read and check the job files, then let sagemaker-training describe the job from them."""
    raw = _read_object(paths, HYPERPARAMETERS, "an object of hyperparameters whose values are JSON-encoded "
                                               "strings, as SageMaker writes them: {\"epochs\": \"3\"}")
    _check_hyperparameter_names(raw)
    resource = _read_object(paths, RESOURCE_CONFIG, "an object with \"current_host\" and \"hosts\", "
                                                   "e.g. {\"current_host\": \"algo-1\", \"hosts\": [\"algo-1\"]}")
    hosts, current_host = _hosts(resource)
    channels = _read_object(paths, INPUT_DATA_CONFIG, "an object with one entry per input channel, "
                                                      "e.g. {\"train\": {\"TrainingInputMode\": \"File\"}}, "
                                                      "or {} for a job without channels")
    decoded = decode_hyperparameters(raw)
    _check_decoded_values(decoded)
    from sagemaker_training import environment

    # The launcher's record of the machine (its GPU count from NVML, honouring CUDA_VISIBLE_DEVICES), which
    # opentc-run and the workers are handed: one count for the whole launch, not sagemaker-training's nvidia-smi
    # list beside it. Outside the try below: the machine is not the job files, and no error of its is theirs.
    machine = probe_host()
    if machine.gpu_problem:
        log.warning("the GPUs: %s; the job goes on with %d GPU(s) counted and the rest unknown", machine.gpu_problem,
                    machine.gpus)
    gpus = machine.gpus
    try:
        # An empty mapping makes Environment read the file itself, which holds the same empty object.
        env = environment.Environment(resource_config=resource, input_data_config=channels,
                                      hyperparameters=decoded)
        description = TrainingJob(
            paths=paths,
            entry_point=env.user_entry_point or None,
            submit_directory=env.module_dir,
            hyperparameters=_frozen(env.hyperparameters),
            framework_params=_frozen(env.additional_framework_parameters),
            user_args=tuple(str(a) for a in env.to_cmd_args()),
            hosts=hosts,
            current_host=current_host,
            machine=machine,
            script_env=_frozen({**env.to_env_vars(), "SM_NUM_GPUS": str(gpus)}),
            code_submitted="sagemaker_submit_directory" in raw,
            job_name=env.job_name or (str(decoded["sagemaker_job_name"]) if decoded.get("sagemaker_job_name")
                                      else None),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BadInput(f"the job files under {paths.input_config} could not be turned into a job: "
                             f"{type(e).__name__}: {e}") from None
    return description


@dataclass(frozen=True)
class AdaptedJob:
    """The job as it really runs, its compiler settings, and one line saying what was recognised and what runs
    instead (for the log)."""

    job: TrainingJob
    settings: JobSettings
    summary: str

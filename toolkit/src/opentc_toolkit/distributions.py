"""The distribution a job asks for, from the hyperparameters the SageMaker SDKs send for `distribution=`.

The SDK v2's `PyTorch(distribution={...})` (sagemaker/pytorch/estimator.py, `_pytorch_distribution_configuration`,
and sagemaker/estimator.py, `Framework._distribution_configuration`) turns each distribution into hyperparameters.
This image runs several workers per host one way, through its own launcher (torchrun's rendezvous, the compiler's
settings in every worker), so each key is either honoured that way or refused before anything runs; none is
ignored, where AWS's PyTorch containers would have started workers the job then silently lacks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentc_launcher.env_values import flag

from .flags import boolean
from .not_started import BadInput

XLA_MULTI_WORKER = "sagemaker_pytorch_xla_multi_worker_enabled"   # distribution={"pytorchxla": {"enabled": True}}
TORCH_DISTRIBUTED = "sagemaker_torch_distributed_enabled"          # distribution={"torch_distributed": {...}}
INSTANCE_TYPE = "sagemaker_instance_type"                          # sent beside torch_distributed: nothing to do
SEVERAL_WORKERS = (XLA_MULTI_WORKER, TORCH_DISTRIBUTED)
INSTEAD = (f'distribution={{"torch_distributed": {{"enabled": True}}}} (the hyperparameter {TORCH_DISTRIBUTED}=true), '
           f"which starts one worker per GPU on every host through this image's launcher, with torchrun's "
           f"environment for torch.distributed (NCCL on GPUs, gloo on CPUs)")

# What each refused key asks for, in the SDK's words. A key with a false or empty value asks for nothing.
REFUSED = {
    "sagemaker_pytorch_ddp_enabled": 'distribution={"pytorchddp": ...}, SageMaker\'s MPI launch of PyTorch DDP',
    "sagemaker_distributed_dataparallel_enabled":
        'distribution={"pytorchddp": ...} or {"smdistributed": {"dataparallel": ...}}, the SageMaker data '
        "parallelism library (smdistributed, started through MPI), which this image does not have",
    "sagemaker_distributed_dataparallel_custom_mpi_options":
        "custom MPI options for the SageMaker data parallelism library, which this image does not have",
    "sagemaker_mpi_enabled": 'distribution={"mpi": ...}, an MPI launch (mpirun), and this image has no MPI',
    "sagemaker_mpi_num_of_processes_per_host": "MPI processes per host, and this image has no MPI",
    "sagemaker_mpi_custom_mpi_options": "custom mpirun options, and this image has no MPI",
    "sagemaker_parameter_server_enabled":
        'distribution={"parameter_server": ...}, TensorFlow\'s parameter servers, which a PyTorch image does not run',
    "sagemaker_multi_worker_mirrored_strategy_enabled":
        'distribution={"multi_worker_mirrored_strategy": ...}, a TensorFlow strategy, which a PyTorch image does '
        "not run",
    "sagemaker_distribution_instance_groups":
        "a distribution over instance groups (a heterogeneous cluster), which this image's launcher does not split",
}
MODEL_PARALLEL = "mp_parameters"   # distribution={"smdistributed": {"modelparallel": ...}} (SMP)


@dataclass(frozen=True)
class Distribution:
    """Whether the job asked for several workers per host, and by which hyperparameters (for messages)."""

    several_workers: bool = False
    asked_by: tuple[str, ...] = ()


def asks(value: Any) -> bool:
    """Whether a distribution key's value asks for something: not false, not empty (as the SDK sends them)."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return False
    return not (isinstance(value, str) and flag(value) is False)


def shown(value: Any) -> str:
    """A hyperparameter's value as a message quotes it: its JSON, cut short past 60 characters."""
    sent = json.dumps(value, ensure_ascii=False)
    return sent if len(sent) <= 60 else sent[:50] + "..."


def read_distribution(framework_params: Mapping[str, Any], script_params: Mapping[str, Any]) -> Distribution:
    """The distribution the job's hyperparameters ask for; a distribution this image cannot run is refused
    (BadInput: exit code 2, before anything starts), naming the key, why, and what to use instead."""
    for key, what in REFUSED.items():
        if key in framework_params and asks(framework_params[key]):
            raise BadInput(f"hyperparameter {key}={shown(framework_params[key])} asks for {what}: this image "
                           f"cannot run it, and would otherwise run one worker per host without saying so. Use "
                           f"{INSTEAD}.")
    if MODEL_PARALLEL in script_params and "sagemaker_distributed_dataparallel_enabled" in framework_params:
        raise BadInput(f'hyperparameter {MODEL_PARALLEL} (sent for distribution={{"smdistributed": '
                       f'{{"modelparallel": ...}}}}) asks for the SageMaker model parallelism library (SMP), which '
                       f"this image does not have. Use {INSTEAD}; a model that does not fit one GPU is sharded with "
                       f"PyTorch's own FSDP (torch.distributed.fsdp.fully_shard) in the script.")
    asked = [key for key in SEVERAL_WORKERS if boolean(framework_params, key, False)]
    return Distribution(several_workers=bool(asked), asked_by=tuple(asked))

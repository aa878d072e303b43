"""The distribution a job asks for, from the hyperparameters the SageMaker SDKs send for `distribution=`.

The SDK v2's `PyTorch(distribution={...})` (sagemaker/pytorch/estimator.py, `_pytorch_distribution_configuration`,
and sagemaker/estimator.py, `Framework._distribution_configuration`) turns each distribution into hyperparameters.
This image runs several workers per host one way, through its own launcher (torchrun's rendezvous, the compiler's
settings in every worker), so each key is either honoured that way or refused before anything runs; none is
ignored, where AWS's PyTorch containers would have started workers the job then silently lacks. The data-parallel
distributions AWS ran through MPI (pytorchddp, smdistributed's dataparallel) are honoured as PyTorch DDP: the same
job, for the scripts that run on torch.distributed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from opentc_launcher.common import flag

from .flags import boolean
from .not_started import BadInput
from .quoted import quoted

XLA_MULTI_WORKER = "sagemaker_pytorch_xla_multi_worker_enabled"   # distribution={"pytorchxla": {"enabled": True}}
TORCH_DISTRIBUTED = "sagemaker_torch_distributed_enabled"          # distribution={"torch_distributed": {...}}
# distribution={"pytorchddp": ...} as the SDK v2's HuggingFace estimator sends it
PYTORCH_DDP = "sagemaker_pytorch_ddp_enabled"
# distribution={"smdistributed": {"dataparallel": ...}}, and {"pytorchddp": ...} as the SDK v2's PyTorch estimator
# rewrites it: SageMaker's data parallelism library (SMDDP), started through MPI, with these options beside it
SMDDP = "sagemaker_distributed_dataparallel_enabled"
SMDDP_MPI_OPTIONS = "sagemaker_distributed_dataparallel_custom_mpi_options"
INSTANCE_TYPE = "sagemaker_instance_type"                          # sent beside torch_distributed: nothing to do
SEVERAL_WORKERS = (XLA_MULTI_WORKER, TORCH_DISTRIBUTED, PYTORCH_DDP, SMDDP)
# Data parallelism that AWS's containers ran through MPI (and, for SMDDP, its own all-reduce library): for a Trainer,
# Accelerate or plain DDP script the same job as torch_distributed's, one process per GPU meeting in torch.distributed.
# transformers' is_sagemaker_dp_enabled() falls back to torch DDP when smdistributed cannot be imported.
AS_PYTORCH_DDP = {
    PYTORCH_DDP: 'distribution={"pytorchddp": ...}, PyTorch DDP started through MPI',
    SMDDP: 'distribution={"pytorchddp": ...} or {"smdistributed": {"dataparallel": ...}}, the SageMaker data '
           "parallelism library (smdistributed, SMDDP) started through MPI",
}
INSTEAD = (f'distribution={{"torch_distributed": {{"enabled": True}}}} (the hyperparameter {TORCH_DISTRIBUTED}=true), '
           f"which starts one worker per GPU on every host through this image's launcher, with torchrun's "
           f"environment for torch.distributed (NCCL on GPUs, gloo on CPUs)")
NO_MPI = ("this image runs data-parallel jobs as PyTorch DDP through its own launcher (torchrun's rendezvous), "
          "without MPI, so there is nothing to hand them to. Drop custom_mpi_options from the distribution (its "
          "workers still run, one per GPU)")

# What each refused key asks for, in the SDK's words, and what to do instead (INSTEAD unless given). A key with a
# false or empty value asks for nothing.
REFUSED: dict[str, tuple[str, str]] = {
    SMDDP_MPI_OPTIONS: ("custom MPI options for the SageMaker data parallelism library", NO_MPI),
    "sagemaker_mpi_enabled": ('distribution={"mpi": ...}, an MPI launch (mpirun), and this image has no MPI', INSTEAD),
    "sagemaker_mpi_num_of_processes_per_host": ("MPI processes per host, and this image has no MPI", INSTEAD),
    "sagemaker_mpi_custom_mpi_options": ("custom mpirun options, and this image has no MPI", INSTEAD),
    "sagemaker_parameter_server_enabled":
        ('distribution={"parameter_server": ...}, TensorFlow\'s parameter servers, which a PyTorch image does not '
         "run", INSTEAD),
    "sagemaker_multi_worker_mirrored_strategy_enabled":
        ('distribution={"multi_worker_mirrored_strategy": ...}, a TensorFlow strategy, which a PyTorch image does '
         "not run", INSTEAD),
    "sagemaker_distribution_instance_groups":
        ("a distribution over instance groups (a heterogeneous cluster), which this image's launcher does not split",
         INSTEAD),
}
MODEL_PARALLEL = "mp_parameters"   # distribution={"smdistributed": {"modelparallel": ...}} (SMP)


class Distribution(Enum):
    """How the job's work is spread over each host: one worker, or one per device (GPU, or on CPUs as many as
    asked), as data-parallel workers (torch_distributed, pytorchddp, smdistributed's dataparallel, an SDK v3
    Torchrun) or as PyTorch/XLA's multi-worker launch (pytorchxla, an AWS-era sm_dist launcher). Both of the latter
    launch the same way, through opentc-run; the name says what the job asked for."""

    NONE = "none"
    DATA_PARALLEL = "data_parallel"
    XLA_MULTI_WORKER = "xla_multi_worker"

    @property
    def label(self) -> str:
        """In words, for the log and the dry run (the value is a code: words may change, codes stay)."""
        return _LABELS[self]


_LABELS = {Distribution.NONE: "one worker",
           Distribution.DATA_PARALLEL: "data-parallel workers, one per device",
           Distribution.XLA_MULTI_WORKER: "PyTorch/XLA's multi-worker launch, one worker per device"}


@dataclass(frozen=True)
class DistributionAsked:
    """The distribution the job asked for, by which hyperparameters, and what the log should say of how the image
    runs what was asked."""

    distribution: Distribution = Distribution.NONE
    asked_by: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def asks(value: Any) -> bool:
    """Whether a distribution key's value asks for something: not false, not empty (as the SDK sends them)."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return False
    return not (isinstance(value, str) and flag(value) is False)


def read_distribution(framework_params: Mapping[str, Any], script_params: Mapping[str, Any]) -> DistributionAsked:
    """The distribution the job's hyperparameters ask for; a distribution this image cannot run is refused
    (BadInput: exit code 2, before anything starts), naming the key, why, and what to use instead."""
    for key, (what, instead) in REFUSED.items():
        if key in framework_params and asks(framework_params[key]):
            raise BadInput(f"hyperparameter {key}={quoted(framework_params[key])} asks for {what}: this image "
                           f"cannot run it, and would otherwise run one worker per host without saying so. "
                           f"{'Use ' if instead is INSTEAD else ''}{instead}.")
    if MODEL_PARALLEL in script_params and SMDDP in framework_params:
        raise BadInput(f'hyperparameter {MODEL_PARALLEL} (sent for distribution={{"smdistributed": '
                       f'{{"modelparallel": ...}}}}) asks for the SageMaker model parallelism library (SMP), which '
                       f"this image does not have. Use {INSTEAD}; a model that does not fit one GPU is sharded with "
                       f"PyTorch's own FSDP (torch.distributed.fsdp.fully_shard) in the script.")
    asked = tuple(key for key in SEVERAL_WORKERS if boolean(framework_params, key, False))
    notes = tuple(as_pytorch_ddp(key) for key in asked if key in AS_PYTORCH_DDP)
    distribution = (Distribution.XLA_MULTI_WORKER if XLA_MULTI_WORKER in asked else
                    Distribution.DATA_PARALLEL if asked else Distribution.NONE)
    return DistributionAsked(distribution=distribution, asked_by=asked, notes=notes)


def as_pytorch_ddp(key: str) -> str:
    """The log's account of a data-parallel key that this image runs as PyTorch DDP."""
    return (f"{key}=true asks for {AS_PYTORCH_DDP[key]}; SageMaker's smdistributed library is not in this image, so "
            f"the job runs as PyTorch DDP: one worker per GPU on every host through this image's launcher, meeting "
            f"in torch.distributed (NCCL on GPUs, gloo on CPUs). The Trainer and Accelerate choose that by "
            f"themselves; a script that imports smdistributed or asks for backend=\"smddp\" must use "
            f"torch.distributed with backend=\"nccl\" instead")

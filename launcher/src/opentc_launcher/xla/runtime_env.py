"""The variables an XLA worker's own process needs before torch_xla is imported: the launch's device in PJRT's words,
and the per-rank files of torch-xla's debug artefacts. Shared by the backend (xla/__init__) and the worker's session."""

from __future__ import annotations

from collections.abc import Mapping

from ..identity import WorkerIdentity, per_rank_files
from ..options import WorkerOptions

# PJRT's names for the launch's devices.
PJRT_DEVICES = {"cuda": "CUDA", "cpu": "CPU", "tpu": "TPU"}
# Debug artefacts that torch-xla writes to one fixed path: with several workers each needs its own file.
PER_RANK_FILE_VARIABLES = ("XLA_SAVE_TENSORS_FILE", "XLA_METRICS_FILE", "PT_XLA_DEBUG_FILE")


def pjrt_device(options: WorkerOptions) -> str:
    return PJRT_DEVICES[options.device]


def xla_runtime_env(options: WorkerOptions, identity: WorkerIdentity, env: Mapping[str, str]) -> dict[str, str]:
    """Variables this worker's own process needs before torch_xla is imported, for the device the launch
    decided.

    torch-xla reads its configuration from the process environment at import time, so the worker sets
    these in its own `os.environ` (they also reach any process the script starts, such as the children of
    `torch_xla.launch`, which is what the script expects).
    """
    updates = {"PJRT_DEVICE": pjrt_device(options)}
    # The PJRT GPU client reads PJRT_LOCAL_PROCESS_RANK (some builds do not fall back to LOCAL_RANK).
    updates["PJRT_LOCAL_PROCESS_RANK"] = env.get("PJRT_LOCAL_PROCESS_RANK", str(identity.local_rank))
    if identity.world_size > 1:
        updates["PJRT_LOCAL_PROCESS_COUNT"] = env.get("PJRT_LOCAL_PROCESS_COUNT", str(identity.local_world_size))
    updates.update(per_rank_files(PER_RANK_FILE_VARIABLES, identity, env))
    return updates

"""The variables an XLA worker's own process needs before torch_xla is imported: the launch's device in PJRT's words,
debug mode's switches (the worker option --debug-mode arrives here and goes no further), and the per-rank files of
torch-xla's debug artefacts. Shared by the backend (xla/__init__) and the worker's session."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..env_values import keep_theirs
from ..identity import WorkerIdentity, per_rank_files
from ..options import WorkerOptions

# PJRT's names for the launch's devices.
PJRT_DEVICES = {"cuda": "CUDA", "cpu": "CPU", "tpu": "TPU"}
# Debug artefacts that torch-xla writes to one fixed path: with several workers each needs its own file.
PER_RANK_FILE_VARIABLES = ("XLA_SAVE_TENSORS_FILE", "XLA_METRICS_FILE", "PT_XLA_DEBUG_FILE")
# XLA reads each whitespace-separated --name=value of this variable: a user's own value gets debug mode's flags it
# lacks (theirs win for a flag both set), rather than being kept whole in place of them.
FLAG_LIST = "XLA_FLAGS"


def pjrt_device(options: WorkerOptions) -> str:
    return PJRT_DEVICES[options.device]


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
        FLAG_LIST: f"--xla_dump_to={os.path.join(folder, 'xla_dump')}",
    }


@dataclass(frozen=True)
class RuntimeEnvironment:
    """What the worker sets in its own environment, and what it found set and kept (lines for its log)."""

    updates: dict[str, str]
    kept: tuple[str, ...] = ()


def xla_runtime_env(options: WorkerOptions, identity: WorkerIdentity, env: Mapping[str, str]) -> RuntimeEnvironment:
    """Variables this worker's own process needs before torch_xla is imported, for the device the launch
    decided and, in debug mode, torch-xla's debug switches (a variable `env` already sets is kept).

    torch-xla reads its configuration from the process environment at import time, so the worker sets
    these in its own `os.environ` (they also reach any process the script starts, such as the children of
    `torch_xla.launch`, which is what the script expects).
    """
    updates = {"PJRT_DEVICE": pjrt_device(options)}
    # The PJRT GPU client reads PJRT_LOCAL_PROCESS_RANK (some builds do not fall back to LOCAL_RANK).
    updates["PJRT_LOCAL_PROCESS_RANK"] = env.get("PJRT_LOCAL_PROCESS_RANK", str(identity.local_rank))
    if identity.world_size > 1:
        updates["PJRT_LOCAL_PROCESS_COUNT"] = env.get("PJRT_LOCAL_PROCESS_COUNT", str(identity.local_world_size))
    kept: tuple[str, ...] = ()
    if options.debug_mode:
        switches, kept = keep_theirs(debug_environment(options.debug_folder()), env, frozenset({FLAG_LIST}))
        updates.update(switches)
    updates.update(per_rank_files(PER_RANK_FILE_VARIABLES, identity, {**env, **updates}))
    return RuntimeEnvironment(updates, kept)

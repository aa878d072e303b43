"""Sharding that a library does only on GPUs: refused on a CPU before anything runs, never silently dropped.

Accelerate turns on its FSDP plugin from ACCELERATE_USE_FSDP (with FSDP_VERSION and the other FSDP_* variables),
and the Trainer's --fsdp/--fsdp_config drive the same plugin. On a CPU both run DDP instead, with the model whole on
every worker, and say nothing: checked with accelerate 1.x on torch 2.7 and 2.14, two processes over gloo, whose
parameters stay plain Parameters (tests/test_distributions.py keeps checking it). On a GPU they are honoured as the
user set them: this module leaves them alone there. On CPUs, FSDP2 called by the script itself (fully_shard) does
shard over gloo; that is the way the refusal names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentc_launcher.common import flag

from .distributions import asks
from .not_started import BadInput
from .quoted import quoted

TRAINER_FSDP = "fsdp"                         # the Trainer's argument, as a hyperparameter (fsdp_config alone is inert)
ACCELERATE_FSDP = "ACCELERATE_USE_FSDP"       # accelerate's switch, from the job's environment


def check_sharding(script_params: Mapping[str, Any], env: Mapping[str, str], device: str) -> None:
    """BadInput (exit 2) when a job on CPUs asks accelerate or the Trainer for FSDP, which would run unsharded."""
    if device.lower() != "cpu":
        return
    asked = []
    if asks(script_params.get(TRAINER_FSDP)):
        asked.append(f"hyperparameter {TRAINER_FSDP}={quoted(script_params[TRAINER_FSDP])}")
    if flag(env.get(ACCELERATE_FSDP, "")):
        asked.append(f"the environment variable {ACCELERATE_FSDP}={env[ACCELERATE_FSDP]}")
    if asked:
        raise BadInput(
            f"{' and '.join(asked)} asks for FSDP sharding through accelerate (which the Trainer's --fsdp uses), and "
            f"accelerate shards only on GPUs: on this job's CPUs it would train with the whole model on every worker "
            f"(DDP) without saying so. On a GPU instance it is honoured as set. On CPUs, drop it (data parallel, the "
            f"model whole on each worker), or shard in the script with PyTorch's own FSDP2 "
            f"(torch.distributed.fsdp.fully_shard, then torch.compile), which shards over gloo.")

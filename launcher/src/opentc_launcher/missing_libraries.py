"""Libraries that scripts written for AWS's containers use and this image does not have: a script that reaches for one
fails with a first line naming the library and what to use instead, not a bare ModuleNotFoundError."""

from __future__ import annotations

from .text import safe_str

SMDISTRIBUTED = (
    "SageMaker's distributed training libraries (smdistributed: data parallelism, SMDDP, and model parallelism, SMP), "
    "which this image does not have: it runs data-parallel jobs as PyTorch DDP. Use torch.distributed with "
    'backend="nccl" ("gloo" on CPUs) instead of smdistributed.dataparallel and backend="smddp", or let the Trainer '
    "or Accelerate choose the backend; shard a model that outgrows one GPU with torch.distributed.fsdp.fully_shard "
    "instead of SMP")


def explanation(exc: BaseException) -> str | None:
    """What the script reached for that this image does not have, and what to do instead; None for other errors."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "smdistributed":
        return f"the script imports {exc.name}, {SMDISTRIBUTED}."
    if "backend type smddp" in safe_str(exc).lower():   # torch.distributed's "Unknown backend type smddp"
        return f'the script asks torch.distributed for backend="smddp", from {SMDISTRIBUTED}.'
    return None

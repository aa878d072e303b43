"""How many GPUs this process can see."""

from __future__ import annotations


def visible_gpu_count() -> int:
    """GPUs this process can see, counted through NVML without creating a CUDA context (0 without a driver)."""
    try:
        import torch

        return int(torch.cuda.device_count())
    except Exception:  # no torch, or a CUDA build without a driver
        return 0

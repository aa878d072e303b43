"""The libraries' switches for workers that run plain PyTorch (no torch_xla), whichever backend compiles them."""

from __future__ import annotations


def library_environment(gpu_count: int) -> dict[str, str]:
    """transformers and accelerate take the XLA device whenever torch_xla imports, unless told not to. On a host
    with no GPU, accelerate's Accelerator() under torchrun sees no device it distributes over and sets up no
    process group (DistributedType.NO): each worker would train its own replica on the whole data set, never
    synchronised, saying nothing. ACCELERATE_USE_CPU makes it the data parallel job (MULTI_CPU, gloo) the user
    asked for; the Trainer's use_cpu says the same."""
    wanted = {"USE_TORCH_XLA": "0"}
    if gpu_count == 0:
        wanted["ACCELERATE_USE_CPU"] = "true"
    return wanted

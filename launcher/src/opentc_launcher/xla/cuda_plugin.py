"""The PJRT_DEVICE=CUDA plugin torch-xla loads, registered through the `torch_xla.plugins` entry point.

Every torch-xla program in an environment where opentc-launcher is installed gets it, not only the
launcher's workers: `import torch_xla` registers installed plugins (PyPI's torch-xla has no CUDA build, so
XLA_REGISTER_INSTALLED_PLUGINS defaults to 1), in a plain `python train.py`, under torchrun, and in the
children of `xmp.spawn` and `torch_xla.launch`. Its client options follow upstream's CUDA plugin (pytorch/xla
plugins/cuda, 2.5 to 2.8), so upstream's documentation of PJRT_ALLOCATOR_* and the rank variables applies.

Loaded at every `import torch_xla`, CPU jobs included: constructing the plugin does nothing; the binary is
found and checked only when torch-xla creates a CUDA client (`library_path`). The entry point is a factory,
and this module imports nothing of torch_xla itself: torch-xla calls the factory while it imports itself,
when its plugins module is ready, so importing this module first can never make a circular import.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ..env_values import number_from_env
from ..gpus import visible_gpu_count
from .cuda import check_cuda_plugin


def _flag(name: str) -> Any:
    """A PJRT_ALLOCATOR_* switch as upstream read it: unset -> None (XLA's default), else true/false.

    Deliberately not env_values.flag: these variables are upstream's (pytorch/xla's CUDA plugin), and a user who set
    PJRT_ALLOCATOR_PREALLOCATE=1 or =yes for it gets what upstream gave, whatever this project's own switches take."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    return value in ("1", "true", "yes", "on")


def _ranks() -> tuple[int, int, int, int]:
    """(local rank, global rank, local world size, world size), as upstream's plugin and torch-xla read them."""
    env = os.environ

    def number(name: str, default: int) -> int:
        return number_from_env(env, name, int, default)

    local_rank = number("PJRT_LOCAL_PROCESS_RANK", number("LOCAL_RANK", 0))
    local_world = number("PJRT_LOCAL_PROCESS_COUNT", number("LOCAL_WORLD_SIZE", 1))
    return local_rank, number("RANK", local_rank), local_world, number("WORLD_SIZE", local_world)


def cuda_plugin() -> Any:
    """The `torch_xla.plugins` entry point: torch-xla registers what this returns for PJRT_DEVICE=CUDA."""
    return plugin_class()()


@functools.cache
def plugin_class() -> type:
    from torch_xla.experimental import plugins

    class CudaPlugin(plugins.DevicePlugin):
        """XLA:CUDA through NVIDIA's PJRT plugin, configured as upstream's CUDA plugin was."""

        def library_path(self) -> str:
            # torch-xla calls this right before it loads the binary: the version check stops a mismatch here,
            # with the versions and the pins to change, instead of a silently accepted or aborting plugin.
            # Strict checking stays on (a user's explicit setting wins) so a mismatch can never run silently.
            os.environ.setdefault("ENABLE_PJRT_COMPATIBILITY", "0")
            return check_cuda_plugin()

        def physical_chip_count(self) -> int:
            count = number_from_env(os.environ, "GPU_NUM_DEVICES", int, None, minimum=1)
            return count if count is not None else max(visible_gpu_count(), 1)

        def configure_single_process(self) -> None:
            pass

        def client_create_options(self) -> dict:
            local_rank, rank, local_world, world = _ranks()
            fraction = number_from_env(os.environ, "PJRT_ALLOCATOR_FRACTION", float, None)
            options = {
                "platform_name": "gpu",
                "allocator": "cuda_async" if _flag("PJRT_ALLOCATOR_CUDA_ASYNC") else "default",
                "memory_fraction": fraction,
                "preallocate": _flag("PJRT_ALLOCATOR_PREALLOCATE"),
                # Several workers on one host: each sees only its own GPU.
                "visible_devices": [local_rank] if local_world > 1 else None,
                "node_id": rank,
                "num_nodes": world,
            }
            return {key: value for key, value in options.items() if value is not None}

        def requires_xla_coordinator(self) -> bool:
            return _ranks()[3] > 1

    CudaPlugin.__qualname__ = "CudaPlugin"
    return CudaPlugin

"""`torch.xla`: the device module torch looks up for a device of type "xla", which torch-xla 2.7 does not register.

torch finds a device's runtime by name, `getattr(torch, device.type)`, and asks it for the device's random number
generator: `torch.utils.checkpoint` (stashing the RNG before the forward, restoring it for the recompute, with
`use_reentrant` True and False) and `torch.random.fork_rng`, whose error names the way out: "register a module by
`torch._register_device_module`". This module is that registration's content, and only what those callers use,
mapped onto torch-xla's own RNG (`xm.get_rng_state` / `xm.set_rng_state`: a running seed the host keeps, so reading
it is no read from the device). The state is torch-xla's (an int), handed back unchanged.

One difference from CUDA: setting torch-xla's state also sets the root its later steps' seeds derive from, so with
dropout a checkpointed job's later steps draw from another (equally deterministic) stream than the same job without
checkpointing; within a step, the recompute draws the forward's masks. torch-xla's own utils.checkpoint does the same.

Registered by the library patch `torch-checkpoint-xla-rng` (library_patches.py), on XLA runs only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

# What it offers: library_patches refuses to register it when torch's callers ask for anything else.
__all__ = ["_initialized", "current_device", "device", "device_count", "get_rng_state", "is_available",
           "is_initialized", "set_rng_state"]

# Asked by checkpoint before it stashes a device's RNG: torch-xla's RNG exists as soon as torch_xla is imported.
_initialized = True

_selected = threading.local()   # the index `with device(i):` selected, per thread (torch_xla.launch runs threads)


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return _initialized


def device_count() -> int:
    """The devices this process addresses as xla:0, xla:1, ..."""
    import torch_xla.runtime as xr

    return xr.addressable_device_count()


def _index(device: Any) -> int | None:
    """The index of a device given as torch gives one (an int, "xla:1", torch.device("xla", 1)); None: the current
    one."""
    if device is None or isinstance(device, int):
        return device
    import torch

    return torch.device(device).index


def current_device() -> int:
    selected = getattr(_selected, "index", None)
    if selected is not None:
        return selected
    import torch_xla

    return torch_xla.device().index or 0


@contextlib.contextmanager
def device(device: Any) -> Iterator[None]:
    """Within it, get_rng_state() and set_rng_state(state) with no device address `device`, as `torch.cuda.device`
    makes a device current for them; torch-xla's default device is left as it is."""
    before = getattr(_selected, "index", None)
    index = _index(device)
    if index is not None and index >= 0:   # torch's convention: None or a negative index selects nothing
        _selected.index = index
    try:
        yield
    finally:
        _selected.index = before


def _xla_device(device: Any) -> str | None:
    """torch-xla's name for the device (None: torch-xla's default device)."""
    index = _index(device) if device is not None else getattr(_selected, "index", None)
    return None if index is None else f"xla:{index}"


def get_rng_state(device: Any = None) -> int:
    import torch_xla.core.xla_model as xm

    return xm.get_rng_state(_xla_device(device))


def set_rng_state(new_state: int, device: Any = None) -> None:
    import torch_xla.core.xla_model as xm

    xm.set_rng_state(new_state, _xla_device(device))

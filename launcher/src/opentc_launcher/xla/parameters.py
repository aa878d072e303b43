"""Modules keep their parameters when they move to XLA: torch's own switch, on in every XLA process the worker
runs (the worker itself, and the processes torch_xla.launch / xmp.spawn start)."""

from __future__ import annotations

SWAP_SWITCH = "torch.__future__.set_swap_module_params_on_conversion"


def keep_parameters_on_move(keep: bool) -> None:
    """torch's own switch for `Module.to()` / `_apply`: with it on, each parameter's contents are swapped in
    place (torch.utils.swap_tensors) instead of the module getting a new Parameter. Without it, moving a model to
    XLA unties tied weights (GPT-2's lm_head and wte become two parameters that train apart) and leaves an
    optimizer created before the move holding the old CPU tensors. Set before the script runs, so a script that
    sets it itself (to False, say) has the last word."""
    import torch

    torch.__future__.set_swap_module_params_on_conversion(keep)


def parameters_kept_on_move() -> bool:
    import torch

    return bool(torch.__future__.get_swap_module_params_on_conversion())

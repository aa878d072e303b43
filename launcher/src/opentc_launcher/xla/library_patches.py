"""Small, version-guarded fixes to libraries that mishandle XLA tensors, applied on XLA runs only (how: patching.py).

Two kinds: code that reads XLA tensors back to the host where it need not (on XLA a host read, `bool(tensor)`
or `.item()`, makes the device finish everything queued before Python can go on: once per training step, it
serialises the device with Python and erases what compiling buys), and code that fails on XLA tensors (saving,
gradient checkpointing, the device checks of transformers 4.x).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import re
import sys
from types import ModuleType
from typing import Any

from ..patching import APPLIES, NOT_NEEDED, Known, LibraryChange, NotNeeded, TargetChanged, arm
from ..patching import source_of as _source
from ..replace import replace_once, set_once
from ..setting_names import setting
from .named_settings import LIBRARY_PATCHES_OFF

log = logging.getLogger("opentc_launcher")


def _is_xla(tensor: object) -> bool:
    device = getattr(tensor, "device", None)
    return getattr(device, "type", None) == "xla"


# --- transformers: attention masks --------------------------------------------------------------------------
# masking_utils decides whether SDPA may use `is_causal=True` instead of a mask by checking that the padding
# mask is all ones (`fast_all(padding_mask)` in `_ignore_causal_mask_sdpa`, `_ignore_bidirectional_mask_sdpa`),
# a host read in every forward pass. It already skips that check for tensors that are being traced
# (`is_tracing(padding_mask)`: dynamo, jit, fx); an XLA lazy tensor is being traced too. The patch makes
# masking_utils' `is_tracing` say so, and the mask is built on the device instead (same attention, no read).
MASK_FUNCTIONS = ("_ignore_causal_mask_sdpa", "_ignore_bidirectional_mask_sdpa")


def _treat_xla_as_traced(module: ModuleType) -> None:
    original = getattr(module, "is_tracing", None)
    if not callable(original):
        raise TargetChanged("transformers.masking_utils has no is_tracing")
    for name in MASK_FUNCTIONS:
        if "is_tracing(padding_mask)" not in _source(getattr(module, name, None)):
            raise TargetChanged(f"transformers.masking_utils.{name} no longer checks is_tracing(padding_mask)")

    def is_tracing(tensor: Any = None) -> bool:
        return original(tensor) or _is_xla(tensor)

    replace_once(module, "is_tracing", is_tracing)


TRANSFORMERS_MASKS = LibraryChange(
    name="transformers-masks-on-device",
    module="transformers.masking_utils",
    target="transformers.masking_utils.is_tracing",
    backend="xla",
    why="masking_utils reads the padding mask back to the host in every forward pass to decide whether SDPA "
        "can skip the mask; on XLA the mask is built on the device instead",
    apply=_treat_xla_as_traced,
)


# --- transformers: the Trainer's loss at logging steps --------------------------------------------------------
# At each logging step the Trainer averages the loss over processes with `nested_gather`, which on XLA is
# `nested_xla_mesh_reduce` -> `xm.mesh_reduce`: a rendezvous that runs several small graphs and reads sizes back
# (`max_size.item()`) even when there is only one process. With one XLA process the reduction is the identity:
# the patch copies the value to the CPU, as mesh_reduce's result was, and skips the rendezvous. With several
# processes the Trainer's own code runs.

def _single_process_gather(module: ModuleType) -> None:
    original = getattr(module, "nested_xla_mesh_reduce", None)
    source = _source(original)
    if (not callable(original) or "xm.mesh_reduce(name, tensors, torch.cat)" not in source
            or "atleast_1d" not in source):
        raise TargetChanged("transformers.trainer_pt_utils.nested_xla_mesh_reduce is not the mesh_reduce of "
                            "torch.cat it was written for")
    import torch
    import torch_xla.runtime as xr

    def on_cpu(tensors: Any) -> Any:
        if isinstance(tensors, (list, tuple)):
            return type(tensors)(on_cpu(t) for t in tensors)
        if isinstance(tensors, dict):
            return type(tensors)({k: on_cpu(t) for k, t in tensors.items()})
        return torch.atleast_1d(tensors.cpu())  # on the CPU: no new graph for the view

    def nested_xla_mesh_reduce(tensors: Any, name: str) -> Any:
        if xr.world_size() > 1:
            return original(tensors, name)
        return on_cpu(tensors)

    replace_once(module, "nested_xla_mesh_reduce", nested_xla_mesh_reduce)


TRANSFORMERS_SINGLE_PROCESS_GATHER = LibraryChange(
    name="transformers-single-process-gather",
    module="transformers.trainer_pt_utils",
    target="transformers.trainer_pt_utils.nested_xla_mesh_reduce",
    backend="xla",
    why="with one XLA process the Trainer's loss gather at logging steps (xm.mesh_reduce) is the identity; it "
        "is a copy to the CPU instead of a rendezvous of several graphs and host reads",
    apply=_single_process_gather,
)


# --- safetensors: saving XLA tensors ----------------------------------------------------------------------------
# An XLA tensor has no host memory: `untyped_storage().data_ptr()` raises "Attempted to access the data pointer
# on an invalid python storage". safetensors' `storage_ptr` (used to find shared tensors before writing) falls
# back only for meta tensors, so `save_file` / transformers' `save_pretrained` / accelerate's `save_model`
# crash on a model that trained on XLA. `_flatten_as_ptr` is the step `save_file` and `save` both take first:
# the patch hands it CPU copies of the XLA tensors, made in one transfer (the caller's dict is not changed).

def _save_xla_tensors_from_cpu(module: ModuleType) -> None:
    original = getattr(module, "_flatten_as_ptr", None)
    if (not callable(original) or list(inspect.signature(original).parameters) != ["tensors", "keep_alive_buffer"]
            or "_flatten_as_ptr(tensors" not in _source(getattr(module, "save_file", None))
            or "_evaluate_tensors_for_save(tensors)" not in _source(original)):
        raise TargetChanged("safetensors.torch.save_file no longer goes through _flatten_as_ptr(tensors, ...)")
    if "xla" in _source(getattr(module, "storage_ptr", None)).lower():
        raise TargetChanged("safetensors.torch.storage_ptr handles XLA tensors itself now")

    def _flatten_as_ptr(tensors: Any, keep_alive_buffer: Any) -> Any:
        names = [name for name, t in tensors.items() if _is_xla(t)] if isinstance(tensors, dict) else []
        if names:
            import torch_xla.core.xla_model as xm

            copies = xm._maybe_convert_to_cpu([tensors[name].detach() for name in names])
            tensors = {**tensors, **dict(zip(names, copies, strict=True))}
        return original(tensors, keep_alive_buffer)

    replace_once(module, "_flatten_as_ptr", _flatten_as_ptr)


SAFETENSORS_SAVE = LibraryChange(
    name="safetensors-save-from-xla",
    module="safetensors.torch",
    target="safetensors.torch._flatten_as_ptr",
    backend="xla",
    why="safetensors cannot find the storage of an XLA tensor (\"invalid python storage\"), so save_pretrained "
        "and accelerate's save_model crashed on XLA; the tensors are copied to the CPU first, in one transfer",
    apply=_save_xla_tensors_from_cpu,
)


# --- accelerate: tied tensors on XLA --------------------------------------------------------------------------
# `Accelerator.save_model` drops tied duplicates with `clean_state_dict_for_safetensors` before its own copy to
# the CPU; that keys tensors by `id_tensor_storage`, which fails on XLA tensors like safetensors' storage_ptr.
# The patch keys an XLA tensor by torch-xla's tensor id, as transformers' own `id_tensor_storage` does.

def _xla_storage_ids(module: ModuleType) -> None:
    original = getattr(module, "id_tensor_storage", None)
    if not callable(original) or "id_tensor_storage(tensor)" not in _source(
            getattr(module, "clean_state_dict_for_safetensors", None)):
        raise TargetChanged("accelerate.utils.other.clean_state_dict_for_safetensors no longer uses "
                            "id_tensor_storage(tensor)")
    if "xla" in _source(original).lower():
        raise TargetChanged("accelerate's id_tensor_storage handles XLA tensors itself now")

    def id_tensor_storage(tensor: Any) -> Any:
        if not _is_xla(tensor):
            return original(tensor)
        import torch_xla

        return tensor.device, torch_xla._XLAC._xla_get_tensor_id(tensor), tensor.nelement() * tensor.element_size()

    replace_once(module, "id_tensor_storage", id_tensor_storage)


ACCELERATE_STORAGE_IDS = LibraryChange(
    name="accelerate-xla-storage-ids",
    module="accelerate.utils.other",
    target="accelerate.utils.other.id_tensor_storage",
    backend="xla",
    why="accelerate's save_model looked for tied tensors by storage, which XLA tensors lack; they are told apart "
        "by torch-xla's tensor id instead",
    apply=_xla_storage_ids,
)


# --- fp16 on XLA: loss scaling without a host read per step -----------------------------------------------------
# fp16 training scales the loss and skips the optimizer step when a gradient overflowed. torch's GradScaler decides
# that on the host (`found_inf.item()` in `_maybe_opt_step`): on XLA a read back every optimizer step. torch-xla's own
# GradScaler takes the sync-free path instead when the optimizer's step accepts `found_inf` (the optimizers in
# torch_xla.amp.syncfree, which skip the update on the device), and transformers offers one as
# optim="adamw_torch_xla". Three things stand between a Trainer job and that path, one patch each:
# accelerate gives XLA:CPU (and TPU) torch's scaler, not torch-xla's; accelerate hands the scaler its optimizer with a
# step wrapped as (*args, **kwargs), which hides `found_inf` from the scaler's signature check; and the Trainer's
# default optimizer is torch's AdamW.

def _xla_grad_scaler(module: ModuleType) -> None:
    original = getattr(module, "get_grad_scaler", None)
    distributed_type = getattr(getattr(module, "DistributedType", None), "XLA", None)
    if not callable(original) or distributed_type is None or "xamp.GradScaler" not in _source(original):
        raise TargetChanged("accelerate.accelerator.get_grad_scaler is not the one that returns torch-xla's "
                            "GradScaler on XLA:CUDA only")

    def get_grad_scaler(distributed_type_asked: Any = None, **kwargs: Any) -> Any:
        if distributed_type_asked == distributed_type:
            import torch_xla.amp as xamp

            return xamp.GradScaler(**kwargs)
        return original(distributed_type_asked, **kwargs)

    replace_once(module, "get_grad_scaler", get_grad_scaler)


ACCELERATE_XLA_GRAD_SCALER = LibraryChange(
    name="accelerate-xla-grad-scaler",
    module="accelerate.accelerator",
    target="accelerate.accelerator.get_grad_scaler",
    backend="xla",
    why="fp16 on every XLA device gets torch-xla's GradScaler (accelerate gave XLA:CPU torch's, which reads the "
        "overflow check back to the host every step)",
    apply=_xla_grad_scaler,
)


def _scaler_sees_the_optimizer(module: ModuleType) -> None:
    original = getattr(module, "patch_optimizer_step", None)
    source = _source(original)
    if not callable(original) or "def patched_step(*args, **kwargs)" not in source \
            or "_accelerate_step_called = True" not in source:
        raise TargetChanged("accelerate.optimizer.patch_optimizer_step is not the (*args, **kwargs) wrapper it was "
                            "written for")
    if "wraps(" in source:
        raise TargetChanged("accelerate's patch_optimizer_step keeps the step's signature itself now")

    def patch_optimizer_step(accelerated_optimizer: Any, method: Any) -> Any:
        @functools.wraps(method)   # inspect.signature follows __wrapped__ to the optimizer's own step
        def patched_step(*args: Any, **kwargs: Any) -> Any:
            accelerated_optimizer._accelerate_step_called = True
            return method(*args, **kwargs)

        return patched_step

    replace_once(module, "patch_optimizer_step", patch_optimizer_step)


ACCELERATE_SCALER_SEES_THE_OPTIMIZER = LibraryChange(
    name="accelerate-scaler-sees-the-optimizer",
    module="accelerate.optimizer",
    target="accelerate.optimizer.patch_optimizer_step",
    backend="xla",
    why="accelerate's wrapper of the optimizer's step keeps the step's signature, so that torch-xla's GradScaler "
        "sees a sync-free optimizer's found_inf and skips the step on the device",
    apply=_scaler_sees_the_optimizer,
)

SYNC_FREE_OPTIM = "adamw_torch_xla"


def _optim_named_on_command_line() -> bool:
    return any(arg == "--optim" or arg.startswith("--optim=") for arg in sys.argv[1:])


def _sync_free_default_optimizer(module: ModuleType) -> None:
    trainer: Any = getattr(module, "Trainer", None)
    original = getattr(trainer, "get_optimizer_cls_and_kwargs", None)
    from transformers.training_args import OptimizerNames, TrainingArguments

    default = TrainingArguments.__dataclass_fields__["optim"].default
    if not callable(original) or SYNC_FREE_OPTIM not in {o.value for o in OptimizerNames}:
        raise TargetChanged(f"transformers' Trainer has no get_optimizer_cls_and_kwargs or no optim "
                            f"{SYNC_FREE_OPTIM}")
    said: list[bool] = []

    def get_optimizer_cls_and_kwargs(args: Any, *model: Any) -> Any:   # transformers 5 passes the model, 4.x not
        chosen = str(getattr(args.optim, "value", args.optim))
        if (getattr(args, "fp16", False) and _is_xla(args) and chosen == str(getattr(default, "value", default))
                and not _optim_named_on_command_line()):
            import copy

            if not said:
                said.append(True)
                log.info("fp16 on XLA: the Trainer's optimizer is torch-xla's sync-free AdamW (optim=\"%s\") "
                         "instead of its default %s, the same update, so that loss scaling checks for overflow on the "
                         "device instead of reading it back every step; --optim chooses another", SYNC_FREE_OPTIM,
                         chosen)
            args = copy.copy(args)
            args.optim = OptimizerNames(SYNC_FREE_OPTIM)
        return original(args, *model)

    if getattr(original, "__opentc_patch__", False):
        return
    get_optimizer_cls_and_kwargs.__opentc_patch__ = True  # type: ignore[attr-defined]
    get_optimizer_cls_and_kwargs.__wrapped__ = original   # type: ignore[attr-defined]
    set_once(trainer, "get_optimizer_cls_and_kwargs", staticmethod(get_optimizer_cls_and_kwargs))  # called on self


TRANSFORMERS_SYNC_FREE_OPTIMIZER = LibraryChange(
    name="transformers-sync-free-fp16-optimizer",
    module="transformers.trainer",
    target="transformers.trainer.Trainer.get_optimizer_cls_and_kwargs",
    backend="xla",
    why=f"a Trainer job with fp16 on XLA whose script chose no optimizer gets torch-xla's sync-free AdamW "
        f"(optim={SYNC_FREE_OPTIM}), which loss scaling steps without a host read",
    apply=_sync_free_default_optimizer,
)


# --- transformers 4.x: the fp16 and bf16 device checks ---------------------------------------------------------
# TrainingArguments in transformers 4.x (to 4.45) allows fp16 on an XLA device only when get_xla_device_type() says
# "GPU", torch-xla 1.x's name for XLA:GPU; torch-xla 2.x on PJRT names it "CUDA" (and XLA:CPU "CPU"), so a Training
# Compiler script's fp16=True failed ("FP16 Mixed precision training ... can only be used on CUDA or NPU devices")
# where AWS's images ran it. The check is the function's only use; transformers 4.46 dropped it and allows fp16 on
# every XLA device, and so does the patch: XLA:CUDA and XLA:CPU answer "GPU".
XLA_DEVICE_CHECK = 'get_xla_device_type(self.device) != "GPU"'


def _xla_device_type_as_4x_knew_it(module: ModuleType) -> None:
    original = getattr(module, "get_xla_device_type", None)
    arguments = getattr(module, "TrainingArguments", None)
    if not callable(original):
        raise NotNeeded("transformers.training_args has no get_xla_device_type")
    if XLA_DEVICE_CHECK not in _source(getattr(arguments, "__post_init__", None)):
        raise NotNeeded("TrainingArguments no longer checks get_xla_device_type(self.device) for fp16")

    def get_xla_device_type(device: Any) -> Any:
        found = original(device)
        return "GPU" if found in ("CUDA", "CPU") else found

    replace_once(module, "get_xla_device_type", get_xla_device_type)


TRANSFORMERS_4_XLA_DEVICE_TYPE = LibraryChange(
    name="transformers-4-fp16-on-xla",
    module="transformers.training_args",
    target="transformers.training_args.get_xla_device_type",
    backend="xla",
    why="transformers 4.x allowed fp16 on XLA only on a device torch-xla 1.x called \"GPU\", which torch-xla 2 "
        "calls \"CUDA\" (XLA:CPU \"CPU\"); both pass the check now, as every XLA device does from transformers 4.46",
    apply=_xla_device_type_as_4x_knew_it,
    unpatched="a script with fp16=True stops at TrainingArguments' device check",
    on_the_images=NOT_NEEDED,
    known=(Known("transformers", ("4.38.0",), APPLIES, "tests/test_aws_examples.py: AWS's GPT-2 notebook (run_clm.py)"),
           Known("transformers", ("4.25.1",), APPLIES, "tests/test_aws_examples.py: AWS's single-GPU notebooks")),
)


# --- torch-xla 1.x's names for the world, which transformers 4.x calls -------------------------------------------
# transformers before 4.3x (and accelerate 0.x) ask torch_xla.core.xla_model for xrt_world_size() and get_ordinal(),
# the names of torch-xla 1.x's XRT runtime; torch-xla 2.7 keeps them in torch_xla.runtime only (world_size(),
# global_ordinal()), so a Training Compiler script's Trainer failed on XLA ("module 'torch_xla.core.xla_model' has no
# attribute 'get_ordinal'"). The patch gives the old names the new meanings, where they are missing.
OLD_WORLD_NAMES = ("xrt_world_size", "get_ordinal")


def _old_world_names(module: ModuleType) -> None:
    if not callable(getattr(module, "xla_device", None)):
        raise TargetChanged("torch_xla.core.xla_model is not the one with xla_device()")
    if all(hasattr(module, name) for name in OLD_WORLD_NAMES):
        raise NotNeeded("torch_xla.core.xla_model has xrt_world_size and get_ordinal itself")
    import torch_xla.runtime as xr

    if not callable(getattr(xr, "world_size", None)) or not callable(getattr(xr, "global_ordinal", None)):
        raise TargetChanged("torch_xla.runtime has no world_size and global_ordinal")

    def xrt_world_size(defval: int = 1) -> int:   # torch-xla 1.x's signature; defval was for a world not set up
        return int(xr.world_size())

    def get_ordinal(defval: int = 0) -> int:
        return int(xr.global_ordinal())

    for name, function in (("xrt_world_size", xrt_world_size), ("get_ordinal", get_ordinal)):
        if not hasattr(module, name):
            set_once(module, name, function)


TORCH_XLA_1_WORLD_NAMES = LibraryChange(
    name="torch-xla-1-world-names",
    module="torch_xla.core.xla_model",
    target="torch_xla.core.xla_model.xrt_world_size and get_ordinal (added where missing)",
    backend="xla",
    why="transformers 4.x (before 4.3x) and accelerate 0.x call xm.xrt_world_size() and xm.get_ordinal(), torch-xla "
        "1.x's names, which torch-xla 2 keeps in torch_xla.runtime only; they answer as world_size() and "
        "global_ordinal() there",
    apply=_old_world_names,
    unpatched="a script of transformers 4.x's era stops where its Trainer asks for the world's size",
)


# --- transformers before 4.29: no local rank on XLA ----------------------------------------------------------------
# TrainingArguments in transformers 4.x before 4.29 takes LOCAL_RANK (which the launcher sets for every worker, as
# torchrun does) for a torch.distributed job, and its Trainer then wraps the model in DistributedDataParallel and
# broadcasts through torch.distributed, on XLA too ("Default process group has not been initialized"). On XLA those
# versions reduce gradients and count processes through torch-xla (xm.optimizer_step, xm.xrt_world_size), and
# Training Compiler started them without LOCAL_RANK: on an XLA device the patch leaves their local_rank at -1.
OLD_LOCAL_RANK = 'os.environ.get("LOCAL_RANK", -1)'


def _no_local_rank_on_xla(module: ModuleType) -> None:
    arguments: Any = getattr(module, "TrainingArguments", None)
    original = getattr(arguments, "__post_init__", None)
    if not callable(original) or OLD_LOCAL_RANK not in _source(original):
        raise NotNeeded("TrainingArguments no longer reads LOCAL_RANK itself")
    if "PartialState" in _source(getattr(arguments, "_setup_devices", None)):
        raise NotNeeded("TrainingArguments sets devices up through accelerate")

    def post_init(self: Any) -> None:
        original(self)
        if self.local_rank != -1 and _is_xla(self):
            self.local_rank = -1

    replace_once(arguments, "__post_init__", post_init)


TRANSFORMERS_4_NO_LOCAL_RANK_ON_XLA = LibraryChange(
    name="transformers-4-no-local-rank-on-xla",
    module="transformers.training_args",
    target="transformers.training_args.TrainingArguments.__post_init__",
    backend="xla",
    why="transformers before 4.29 took LOCAL_RANK for a torch.distributed job on XLA too (DDP, torch.distributed "
        "broadcasts); on an XLA device its local_rank stays -1, as under Training Compiler, and torch-xla counts "
        "the processes",
    apply=_no_local_rank_on_xla,
    unpatched="a Trainer script of transformers 4.x before 4.29 stops at torch.distributed on XLA",
    on_the_images=NOT_NEEDED,
)


# --- torch: gradient checkpointing on XLA --------------------------------------------------------------------
# torch.utils.checkpoint stashes the RNG of its inputs' device before the forward and restores it for the recompute
# (so that dropout draws the same mask twice), through the device's module, `getattr(torch, device.type)`; so does
# torch.random.fork_rng, which it calls. torch-xla 2.7 registers no `torch.xla`, so every checkpointed forward on XLA
# failed ("module 'torch' has no attribute 'xla'"), with use_reentrant True and False: transformers'
# gradient_checkpointing, TRL's SFT default. The root cause is the missing registration, and torch's own error for it
# names the fix (`torch._register_device_module`): the patch registers xla/device_module.py, torch-xla's RNG behind
# the names those callers use. Wrapping checkpoint instead would leave fork_rng and every other caller failing;
# torch-xla's own utils.checkpoint takes use_reentrant=True only, while transformers 5 passes False.
# The patch refuses to apply when the callers ask the device module for anything device_module.py lacks.
RNG_CALLERS = {"torch.utils.checkpoint": ("get_device_states", "set_device_states", "CheckpointFunction",
                                          "_checkpoint_without_reentrant_generator"),
               "torch.random": ("fork_rng",)}
_DEVICE_MODULE_USE = re.compile(r"\bdevice_mod(?:ule)?\.(\w+)|getattr\(\s*device_mod(?:ule)?,\s*[\"'](\w+)[\"']")


def device_module_names_used() -> set[str]:
    """What torch's RNG-forking code asks of a device module (read from its source), or TargetChanged."""
    used: set[str] = set()
    for module_name, functions in RNG_CALLERS.items():
        module = importlib.import_module(module_name)
        for function in functions:
            source = _source(getattr(module, function, None))
            if not source:
                raise TargetChanged(f"{module_name}.{function} is not there")
            used |= {a or b for a, b in _DEVICE_MODULE_USE.findall(source)}
    return used


def _register_xla_device_module(module: ModuleType) -> None:
    import torch

    from . import device_module

    if getattr(torch, "xla", None) is device_module:
        return
    if hasattr(torch, "xla"):
        raise TargetChanged("torch.xla exists already: torch-xla registers a device module itself now")
    random_source = _source(getattr(torch.random, "fork_rng", None))
    if ("getattr(torch, device)" not in _source(getattr(module, "_get_device_module", None))
            or "getattr(torch, device_type, None)" not in random_source):
        raise TargetChanged("torch.utils.checkpoint and torch.random.fork_rng no longer find a device's module as "
                            "getattr(torch, device type)")
    missing = sorted(device_module_names_used() - set(device_module.__all__))
    if missing:
        raise TargetChanged(f"torch's checkpoint and fork_rng now ask a device module for {', '.join(missing)}")
    torch._register_device_module("xla", device_module)


TORCH_CHECKPOINT_XLA_RNG = LibraryChange(
    name="torch-checkpoint-xla-rng",
    module="torch.utils.checkpoint",
    target="torch.xla (a device module registered with torch._register_device_module)",
    backend="xla",
    why="gradient checkpointing (torch.utils.checkpoint, transformers' gradient_checkpointing) failed on XLA for want "
        "of a torch.xla device module; torch-xla's RNG is registered as one, so the recompute draws the forward's "
        "dropout masks",
    apply=_register_xla_device_module,
    unpatched="gradient checkpointing fails on XLA (\"module 'torch' has no attribute 'xla'\")",
)


# Tied weights after the move to XLA need no patch: the worker turns on torch's own switch for it
# (xla.parameters.keep_parameters_on_move), which keeps every Parameter, so accelerate's prepare keeps the ties.
PATCHES: tuple[LibraryChange, ...] = (TRANSFORMERS_MASKS, TRANSFORMERS_SINGLE_PROCESS_GATHER, SAFETENSORS_SAVE,
                                     ACCELERATE_STORAGE_IDS, ACCELERATE_XLA_GRAD_SCALER,
                                     ACCELERATE_SCALER_SEES_THE_OPTIMIZER, TRANSFORMERS_SYNC_FREE_OPTIMIZER,
                                     TRANSFORMERS_4_XLA_DEVICE_TYPE, TORCH_XLA_1_WORLD_NAMES,
                                     TRANSFORMERS_4_NO_LOCAL_RANK_ON_XLA, TORCH_CHECKPOINT_XLA_RNG)


def install(patches: tuple[LibraryChange, ...] = PATCHES) -> list[str]:
    """Arm every XLA patch (patching.arm). Returns the names armed."""
    return arm(patches, "for XLA", setting(LIBRARY_PATCHES_OFF))

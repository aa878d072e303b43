"""A Hugging Face Trainer step that never waits for the device, on every backend: version-guarded library patches
(patching.py), each logged, all off with the other library patches.

transformers' Trainer reads the device back on every step where nothing needs it (host_reads.py counts them): on a
GPU each read makes the host wait for everything queued, so the host's work for the next step (the optimizer's
bookkeeping, the scheduler, collating the next batch) runs after the GPU's instead of beside it
(../shared/reference/trainer-step-on-gpu.md). Each patch keeps what the step computes and removes the wait:

- the loss's nan/inf filter (`logging_nan_inf_filter`, on by default) decided on the device: transformers turns
  `isnan(loss) or isinf(loss)` into Python booleans, two reads a step (it skips the filter where torch-xla is
  installed, so the reads are the inductor image's);
- an all-ones attention mask known on the host: the data collator's mask is all ones for fixed-size blocks (run_clm's),
  and masking_utils reads it back in every forward pass to find that out, then builds no mask. The batch's mask is
  checked on the host before it is copied (accelerate's DataLoaderShard), where that is free, and masking_utils is
  given what it would have concluded (no mask: SDPA's `is_causal`, which is also what lets a GPU take its flash
  kernel). A mask with padding is not marked, and masking_utils reads it as before;
- the batch's copy to a GPU asynchronous (`non_blocking=True`; the Trainer's DataLoader pins its batches), where
  accelerate waits for it by default;
- the default data collator's lists of token ids made into tensors through NumPy (about 4x faster for 8 x 512): with
  no wait left, collation is what the host does beside the GPU, so it is worth making short;
- the model's parameters counted once for the Trainer's FLOPs total, where it walked every module and parameter at
  every step (0.37 ms of the host's time a step for GPT-2 small on this project's CPU), for the same reason.
"""

from __future__ import annotations
import __future__

import ast
import contextvars
import inspect
import logging
import re
import textwrap
from collections.abc import Mapping
from types import FunctionType, ModuleType
from typing import Any

from .patching import LibraryChange, TargetChanged, arm, source_of
from .replace import replace_once
from .setting_names import option_setting, setting

log = logging.getLogger("opentc_launcher")

UNPATCHED = "the Trainer's step still waits for the device there"
PATCHES_OFF = option_setting("library_patches", "false")
# What a mask tensor the image found all ones on the host carries (a Python attribute: tensors have a __dict__).
ALL_ONES = "_opentc_all_ones"


# --- transformers: the loss's nan/inf filter on the device --------------------------------------------------------
# The Trainer's epoch loop (Trainer._run_epoch in transformers 5, _inner_training_loop in 4.x) adds each step's loss to
# a running total on the device, except that a nan or inf loss adds the average so far instead:
#     if (args.logging_nan_inf_filter and not is_torch_xla_available()
#             and (torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step))):
#         tr_loss += tr_loss / (1 + self.state.global_step - self._globalstep_last_logged)
#     else:
#         <the device check>; tr_loss += tr_loss_step
# The patch makes the choice on the device (torch.where) and adds the chosen value in the else branch's body:
#     if args.logging_nan_inf_filter and not is_torch_xla_available():
#         tr_loss_step = torch.where(torch.isfinite(tr_loss_step), tr_loss_step, tr_loss / (1 + ...))
#     if True:
#         <the device check>; tr_loss += tr_loss_step
# The same total, no read. The method is recompiled from its source with that one change, its other lines where they
# were (a traceback still points at the right line of trainer.py).
NAN_INF_FILTER = re.compile(
    r"(?P<indent>[ ]*)if \(\n"
    r"\s*(?P<args>[\w.]+)\.logging_nan_inf_filter\n"
    r"\s*and not (?P<xla>\w+)\(\)\n"
    r"\s*and \(torch\.isnan\(tr_loss_step\) or torch\.isinf\(tr_loss_step\)\)\n"
    r"\s*\):\n"
    r"(?P<comment>\s*#[^\n]*\n)?"
    r"\s*(?P<total>[\w.]+) \+= (?P=total) / (?P<average>\(1 \+ self\.state\.global_step - "
    r"self\._globalstep_last_logged\))\n"
    r"(?P=indent)else:\n")
PRIVATE_NAME = re.compile(r"\.__[A-Za-z]\w*(?<!__)\b")   # mangled inside a class: recompiled outside it, not


def _filter_on_device(match: re.Match[str]) -> str:
    indent, inner = match["indent"], match["indent"] + "    "
    lines = [f"{indent}if {match['args']}.logging_nan_inf_filter and not {match['xla']}():",
             f"{inner}tr_loss_step = torch.where(torch.isfinite(tr_loss_step), tr_loss_step, "
             f"{match['total']} / {match['average']})",
             f"{indent}if True:"]
    replaced = match.group(0).count("\n")
    return "\n".join(lines) + "\n" * (replaced - len(lines) + 1)   # as many lines as it replaces


def _recompiled(function: FunctionType, source: str) -> FunctionType:
    """`function` compiled again from `source` (its own, changed), in its module's globals, at its own lines."""
    tree = ast.parse(textwrap.dedent(source))
    ast.increment_lineno(tree, function.__code__.co_firstlineno - 1)
    namespace: dict[str, Any] = {}
    # Annotations stay unevaluated, as the module may have written them for type checkers only.
    code = compile(tree, function.__code__.co_filename, "exec", flags=__future__.annotations.compiler_flag,
                   dont_inherit=True)
    exec(code, function.__globals__, namespace)
    changed: FunctionType = namespace[function.__name__]
    changed.__qualname__, changed.__module__ = function.__qualname__, function.__module__
    changed.__defaults__, changed.__kwdefaults__ = function.__defaults__, function.__kwdefaults__
    return changed


def _nan_inf_filter_on_device(module: ModuleType) -> None:
    trainer = getattr(module, "Trainer", None)
    found = [(name, f, source_of(f)) for name, f in vars(trainer or object).items()
             if isinstance(f, FunctionType) and "logging_nan_inf_filter" in source_of(f)]
    matching = [(name, f, s) for name, f, s in found if len(NAN_INF_FILTER.findall(s)) == 1]
    if len(matching) != 1:
        raise TargetChanged("no one method of transformers' Trainer filters nan/inf losses with "
                            "`torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step)` as written for")
    name, function, source = matching[0]
    if function.__code__.co_freevars or "super()" in source or PRIVATE_NAME.search(source):
        raise TargetChanged(f"Trainer.{name} cannot be recompiled on its own (a closure, super() or a private name)")
    if source.lstrip().startswith("@"):
        raise TargetChanged(f"Trainer.{name} is decorated")
    replace_once(trainer, name, _recompiled(function, NAN_INF_FILTER.sub(_filter_on_device, source)),
                 key="opentc.nan-inf-filter-on-device")


NAN_INF_FILTER_ON_DEVICE = LibraryChange(
    name="transformers-nan-inf-filter-on-device",
    module="transformers.trainer",
    target="transformers.trainer.Trainer._run_epoch (the method that filters nan/inf losses, recompiled)",
    why="the Trainer's filter of nan/inf losses (logging_nan_inf_filter) read each step's loss back twice; the "
        "choice is made on the device, the running total the same",
    apply=_nan_inf_filter_on_device,
    unpatched=UNPATCHED,
)


# --- accelerate: the batch's copy, and what its mask is -------------------------------------------------------------
# accelerate's DataLoaderShard sends each batch to the device with send_to_device(batch, device,
# non_blocking=self._non_blocking), accelerate.data_loader's own name for it. Two patches wrap that name.

def _data_loader_sends(module: ModuleType) -> Any:
    send = getattr(module, "send_to_device", None)
    if not callable(send) or "send_to_device(current_batch, self.device" not in source_of(
            getattr(module, "DataLoaderShard", None)):
        raise TargetChanged("accelerate's DataLoaderShard no longer sends its batches with send_to_device")
    parameters = list(inspect.signature(send).parameters)
    if parameters[:3] != ["tensor", "device", "non_blocking"]:
        raise TargetChanged("accelerate's send_to_device takes other arguments")
    return send


def _copies_without_waiting(module: ModuleType) -> None:
    send = _data_loader_sends(module)

    def send_to_device(tensor: Any, device: Any, non_blocking: bool = False, *args: Any, **kwargs: Any) -> Any:
        to_a_gpu = str(device).startswith("cuda")
        return send(tensor, device, non_blocking or to_a_gpu, *args, **kwargs)

    replace_once(module, "send_to_device", send_to_device, key="opentc.copies-without-waiting")


COPIES_WITHOUT_WAITING = LibraryChange(
    name="accelerate-copies-batches-without-waiting",
    module="accelerate.data_loader",
    target="accelerate.data_loader.send_to_device",
    why="accelerate copied each batch to the GPU and waited for the copy (non_blocking=False); the copy is "
        "asynchronous, from the pinned memory the Trainer's DataLoader gives it",
    apply=_copies_without_waiting,
    unpatched=UNPATCHED,
)


def all_ones_on_the_host(mask: Any) -> bool:
    """Whether a batch's attention mask is a 2-D host tensor with no padding (every entry true: what masking_utils
    checks), read where reading costs nothing."""
    import torch

    return (isinstance(mask, torch.Tensor) and mask.device.type == "cpu" and mask.dim() == 2
            and mask.numel() > 0 and bool(mask.all()))


def _notes_all_ones_masks(module: ModuleType) -> None:
    send = _data_loader_sends(module)

    def send_to_device(tensor: Any, device: Any, *args: Any, **kwargs: Any) -> Any:
        mask = tensor.get("attention_mask") if isinstance(tensor, Mapping) else None
        all_ones = mask is not None and all_ones_on_the_host(mask)
        sent = send(tensor, device, *args, **kwargs)
        if all_ones:
            setattr(sent["attention_mask"], ALL_ONES, True)
        return sent

    replace_once(module, "send_to_device", send_to_device, key="opentc.notes-all-ones-masks")


NOTES_ALL_ONES_MASKS = LibraryChange(
    name="accelerate-notes-all-ones-masks",
    module="accelerate.data_loader",
    target="accelerate.data_loader.send_to_device",
    why="a batch's attention mask with no padding is found so on the host, before its copy to the device, for "
        "transformers-masks-known-all-ones",
    apply=_notes_all_ones_masks,
    unpatched=UNPATCHED,
)


# --- transformers: the Trainer's own copy keeps what is known of the mask ---------------------------------------------
# The Trainer moves each batch to its device again (Trainer._prepare_input: `data.to(**kwargs)`), which copies a
# tensor whose device it names differently ("cpu" and accelerate's "cpu:0" on a CPU): the copy carries what was found.

def _trainer_keeps_mask_facts(module: ModuleType) -> None:
    trainer = getattr(module, "Trainer", None)
    original = getattr(trainer, "_prepare_input", None)
    if not callable(original) or "return data.to(**kwargs)" not in source_of(original):
        raise TargetChanged("Trainer._prepare_input no longer moves a tensor with data.to(**kwargs)")

    def _prepare_input(self: Any, data: Any) -> Any:
        prepared = original(self, data)
        if prepared is not data and getattr(data, ALL_ONES, False):
            setattr(prepared, ALL_ONES, True)
        return prepared

    replace_once(trainer, "_prepare_input", _prepare_input, key="opentc.trainer-keeps-mask-facts")


TRAINER_KEEPS_MASK_FACTS = LibraryChange(
    name="transformers-trainer-keeps-mask-facts",
    module="transformers.trainer",
    target="transformers.trainer.Trainer._prepare_input",
    why="the Trainer's own move of a batch to its device copies it where the device is named differently; the copy "
        "of a mask found all ones is known so too, for transformers-masks-known-all-ones",
    apply=_trainer_keeps_mask_facts,
    unpatched=UNPATCHED,
)


# --- transformers: a mask known to be all ones ----------------------------------------------------------------------
# masking_utils' create_causal_mask (and its kin) builds no mask for an attention mask with no padding: it reads the
# mask back to find that out (`padding_mask is None or fast_all(padding_mask)` in _ignore_causal_mask_sdpa), and then
# does what it does for none. Given a mask the host found all ones (or a view of one: GPT-2 reshapes it first), the
# patch passes none, which is what it would have concluded, without the read. Without a mask masking_utils would look
# for packed sequences in the position ids (another read), which it never does with one: the position ids go too.
# While Dynamo traces (a model compiled whole) masking_utils never reads the mask, and runs as it is.
MASK_FUNCTIONS = ("create_causal_mask", "create_bidirectional_mask", "create_sliding_window_causal_mask",
                  "create_chunked_causal_mask")
NONE_IS_ALL_ONES = "padding_mask is None or fast_all(padding_mask)"
PACKED_ONLY_WITHOUT_A_MASK = "if position_ids is not None and attention_mask is None"


def known_all_ones(mask: Any) -> bool:
    """Whether `mask` is a mask the host found all ones, or a view of one."""
    return bool(getattr(mask, ALL_ONES, False) or getattr(getattr(mask, "_base", None), ALL_ONES, False))


def _masks_known_all_ones(module: ModuleType) -> None:
    if NONE_IS_ALL_ONES not in source_of(getattr(module, "_ignore_causal_mask_sdpa", None)):
        raise TargetChanged("masking_utils no longer treats no padding mask as one with no padding "
                            f"(`{NONE_IS_ALL_ONES}`)")
    if PACKED_ONLY_WITHOUT_A_MASK not in source_of(getattr(module, "_preprocess_mask_arguments", None)):
        raise TargetChanged("masking_utils reads the position ids whether or not there is a mask")
    wrapped = []
    for name in MASK_FUNCTIONS:
        original = getattr(module, name, None)
        if not callable(original):
            continue
        signature = inspect.signature(original)
        if "attention_mask" not in signature.parameters:
            raise TargetChanged(f"masking_utils.{name} takes no attention_mask")
        replace_once(module, name, _without_known_mask(original, signature), key=f"opentc.known-all-ones.{name}")
        wrapped.append(name)
    if "create_causal_mask" not in wrapped:
        raise TargetChanged("masking_utils has no create_causal_mask")


def _without_known_mask(original: Any, signature: inspect.Signature) -> Any:
    import torch

    def create_mask(*args: Any, **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling():
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)
            arguments = bound.arguments
            if known_all_ones(arguments.get("attention_mask")) and arguments.get("block_sequence_ids") is None:
                arguments["attention_mask"] = None
                if "position_ids" in arguments:
                    arguments["position_ids"] = None
                return original(*bound.args, **bound.kwargs)
        return original(*args, **kwargs)

    create_mask.__name__ = create_mask.__qualname__ = original.__name__
    return create_mask


MASKS_KNOWN_ALL_ONES = LibraryChange(
    name="transformers-masks-known-all-ones",
    module="transformers.masking_utils",
    target="transformers.masking_utils.create_causal_mask (and create_bidirectional_mask, "
           "create_sliding_window_causal_mask, create_chunked_causal_mask)",
    why="masking_utils read the attention mask back in every forward pass to find it had no padding; a mask the "
        "host found so (accelerate-notes-all-ones-masks) is given as none, which is what masking_utils concludes",
    apply=_masks_known_all_ones,
    unpatched=UNPATCHED,
)


# --- transformers: collation through NumPy ----------------------------------------------------------------------------
# default_data_collator (run_clm's, and the Trainer's default) makes each key's lists of token ids into a tensor with
# torch.tensor(list of lists), element by element. np.array does the same in C (int64, as torch.tensor makes of Python
# ints); any other batch (labels, floats, ragged, nested, tensors, arrays) goes to transformers' own.

def fast_collation(features: list[Any]) -> dict[str, Any] | None:
    """The batch, where every feature is a mapping of lists of Python ints of one length per key and nothing needs
    the label handling; else None."""
    import numpy as np
    import torch

    first = features[0] if features else None
    if not isinstance(first, Mapping) or not first or "label" in first or "label_ids" in first:
        return None
    batch = {}
    for key, value in first.items():
        if not isinstance(value, list) or not value or type(value[0]) is not int:
            return None
        try:
            rows = np.array([feature[key] for feature in features])
        except (ValueError, KeyError, TypeError):
            return None
        if rows.dtype != np.int64 or rows.ndim != 2:
            return None
        batch[key] = torch.from_numpy(rows)
    return batch


def _collation_through_numpy(module: ModuleType) -> None:
    original = getattr(module, "torch_default_data_collator", None)
    source = source_of(original)
    if not callable(original) or "batch[k] = torch.tensor([f[k] for f in features])" not in source:
        raise TargetChanged("transformers' torch_default_data_collator no longer makes lists into tensors with "
                            "torch.tensor")

    def torch_default_data_collator(features: list[Any]) -> dict[str, Any]:
        batch = fast_collation(features)
        return batch if batch is not None else original(features)

    replace_once(module, "torch_default_data_collator", torch_default_data_collator,
                 key="opentc.collation-through-numpy")


COLLATION_THROUGH_NUMPY = LibraryChange(
    name="transformers-collation-through-numpy",
    module="transformers.data.data_collator",
    target="transformers.data.data_collator.torch_default_data_collator",
    why="default_data_collator made lists of token ids into tensors element by element; NumPy makes the same tensors",
    apply=_collation_through_numpy,
    unpatched="collation keeps its cost",
)


# --- transformers: the Trainer's FLOPs, its model's parameters counted once ----------------------------------------
# Every step the Trainer adds the step's floating-point operations to its total (current_flos, logged as total_flos):
# 6 x the batch's tokens x model.num_parameters(exclude_embeddings=True), in Trainer.floating_point_ops (transformers
# 5), or in the model's own floating_point_ops, which the Trainer's calls (4.x). num_parameters walks every module and
# parameter: for GPT-2 small, 4,192 calls of named_modules a step (the H200's figure 9, benchmarks/RESULTS.md), 0.37 ms
# of the host's time a step on this project's CPU, 0.02 ms counted once (2 ms under the profiler, its own cost in
# it). While the Trainer counts its FLOPs, a model's count without its embeddings is taken once and kept on the model;
# anywhere else num_parameters counts as it always did. (A model that gains or loses parameters while it trains keeps
# its first count in that total, a figure the Trainer only logs.)
COUNTING_FLOS: contextvars.ContextVar[bool] = contextvars.ContextVar("opentc_counting_flos", default=False)
PARAMETERS_KEPT = "_opentc_parameters_without_embeddings"   # in the model's __dict__, beside torch's own
COUNTED_IN_THE_TRAINER = "num_parameters(exclude_embeddings=True)"      # transformers 5's Trainer.floating_point_ops
COUNTED_IN_THE_MODEL = ("self.model.floating_point_ops(inputs)",        # transformers 4.x: the model's own
                        "num_parameters(exclude_embeddings=exclude_embeddings)")


def _counts_parameters_once(module: ModuleType) -> None:
    trainer = getattr(module, "Trainer", None)
    flos = getattr(trainer, "floating_point_ops", None)
    model_class = getattr(module, "PreTrainedModel", None)
    owner = next((c for c in getattr(model_class, "__mro__", ()) if "num_parameters" in vars(c)), None)
    if not callable(flos) or owner is None:
        raise TargetChanged("transformers' Trainer has no floating_point_ops, or its models no num_parameters")
    counted_by_model = source_of(getattr(model_class, "floating_point_ops", None))
    if COUNTED_IN_THE_TRAINER not in source_of(flos) and not (
            COUNTED_IN_THE_MODEL[0] in source_of(flos) and COUNTED_IN_THE_MODEL[1] in counted_by_model):
        raise TargetChanged("the Trainer no longer counts its FLOPs with num_parameters(exclude_embeddings=True)")
    count = vars(owner)["num_parameters"]

    def num_parameters(self: Any, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        if not (COUNTING_FLOS.get() and exclude_embeddings and not only_trainable):
            return count(self, only_trainable, exclude_embeddings)
        kept = self.__dict__.get(PARAMETERS_KEPT)
        if kept is None:
            kept = self.__dict__[PARAMETERS_KEPT] = count(self, only_trainable, exclude_embeddings)
        return kept

    def floating_point_ops(self: Any, inputs: Any) -> Any:
        token = COUNTING_FLOS.set(True)
        try:
            return flos(self, inputs)
        finally:
            COUNTING_FLOS.reset(token)

    replace_once(owner, "num_parameters", num_parameters, key="opentc.counts-parameters-once")
    replace_once(trainer, "floating_point_ops", floating_point_ops, key="opentc.counts-parameters-once")


COUNTS_PARAMETERS_ONCE = LibraryChange(
    name="transformers-trainer-counts-parameters-once",
    module="transformers.trainer",
    target="transformers.trainer.Trainer.floating_point_ops and transformers.modeling_utils.ModuleUtilsMixin."
           "num_parameters (kept while the Trainer counts its FLOPs)",
    why="the Trainer counted its model's parameters, walking every module, at every step for its FLOPs total; they "
        "are counted once, the same total",
    apply=_counts_parameters_once,
    unpatched="the Trainer's step keeps that host work",
)

PATCHES: tuple[LibraryChange, ...] = (NAN_INF_FILTER_ON_DEVICE, COPIES_WITHOUT_WAITING, NOTES_ALL_ONES_MASKS,
                                     TRAINER_KEEPS_MASK_FACTS, MASKS_KNOWN_ALL_ONES, COLLATION_THROUGH_NUMPY,
                                     COUNTS_PARAMETERS_ONCE)


def install(patches: tuple[LibraryChange, ...] = PATCHES) -> list[str]:
    """Arm them (patching.arm), for every backend. Returns the names armed."""
    return arm(patches, "for a Trainer step without host reads", setting(PATCHES_OFF))

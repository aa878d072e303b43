"""Measures, on real torch-xla (CPU), what each library patch targets, unpatched and patched, and prints JSON.

tests/test_library_patches.py asserts on it: that the installed libraries still have the code each patch was
written for, that this code still reads from the device (else the patch is obsolete), and that the patch
removes the read without changing the result.
"""

import json
import os
import sys
import tempfile

import accelerate
import torch
import torch_xla
import torch_xla.debug.metrics as met
import transformers.masking_utils as masking_utils
import transformers.trainer_pt_utils as trainer_pt_utils

from opentc_launcher.patching import apply
from opentc_launcher.xla import library_patches


def counters():
    return (int(met.counter_value("aten::_local_scalar_dense") or 0), int(met.counter_value("ExecuteComputation") or 0))


def measure(fn):
    torch_xla.sync()
    before = counters()
    result = fn()
    after = counters()
    return result, {"host_reads": after[0] - before[0], "executions": after[1] - before[1]}


device = torch_xla.device()
padding = torch.ones(2, 16, dtype=torch.bool, device=device)
torch_xla.sync()
out = {}

ignore_mask = masking_utils._ignore_causal_mask_sdpa
skip, unpatched = measure(lambda: ignore_mask(padding, 16, 16, 0, 0))
mask, _ = measure(lambda: masking_utils.sdpa_mask(batch_size=2, q_length=16, kv_length=16, attention_mask=padding))
applied = apply(library_patches.TRANSFORMERS_MASKS, masking_utils)
skip_patched, patched = measure(lambda: ignore_mask(padding, 16, 16, 0, 0))
mask_patched, _ = measure(lambda: masking_utils.sdpa_mask(batch_size=2, q_length=16, kv_length=16,
                                                          attention_mask=padding))
reference = torch.tril(torch.ones(16, 16, dtype=torch.bool)).expand(2, 1, 16, 16)
out["masks"] = {
    "applied": applied, "unpatched": unpatched, "patched": patched,
    "unpatched_skips_mask": skip is True and mask is None,
    "patched_mask_is_causal": skip_patched is False and mask_patched is not None
    and bool(torch.equal(mask_patched.cpu(), reference)),
}

loss = torch.tensor(2.5, device=device) * 2
torch_xla.sync()
gather = trainer_pt_utils.nested_xla_mesh_reduce
gathered, unpatched = measure(lambda: gather(loss, "loss"))
applied = apply(library_patches.TRANSFORMERS_SINGLE_PROCESS_GATHER, trainer_pt_utils)
gathered_patched, patched = measure(lambda: trainer_pt_utils.nested_xla_mesh_reduce(loss, "loss"))
out["gather"] = {
    "applied": applied, "unpatched": unpatched, "patched": patched,
    "same_result": gathered.device.type == gathered_patched.device.type == "cpu"
    and bool(torch.equal(gathered, gathered_patched)),
}


def crash(fn):
    """The message of the RuntimeError fn raises, or None."""
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


import safetensors.torch as safetensors_torch  # noqa: E402

weights = {"a": torch.arange(6.0, device=device).reshape(2, 3), "b": torch.ones(3, device=device)}
torch_xla.sync()
saved = os.path.join(tempfile.mkdtemp(), "w.safetensors")
unpatched = crash(lambda: safetensors_torch.save_file(weights, saved))
applied = apply(library_patches.SAFETENSORS_SAVE, safetensors_torch)
patched = crash(lambda: safetensors_torch.save_file(weights, saved))
loaded = safetensors_torch.load_file(saved) if patched is None else {}
out["safetensors"] = {
    "applied": applied, "unpatched_error": unpatched, "patched_error": patched,
    "round_trip": sorted(loaded) == ["a", "b"] and all(torch.equal(loaded[k], weights[k].cpu()) for k in loaded),
    "caller_dict_untouched": all(t.device.type == "xla" for t in weights.values()),
}

import accelerate.accelerator  # noqa: E402
import accelerate.utils.other as accelerate_other  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

accelerate.PartialState()   # accelerate's logging needs it
state = {"wte": weights["a"], "lm_head": weights["a"], "bias": weights["b"]}   # one tensor under two names
unpatched = crash(lambda: accelerate_other.clean_state_dict_for_safetensors(dict(state)))
applied = apply(library_patches.ACCELERATE_STORAGE_IDS, accelerate_other)
cleaned = accelerate_other.clean_state_dict_for_safetensors(dict(state))
out["accelerate_ids"] = {"applied": applied, "unpatched_error": unpatched, "patched_keys": sorted(cleaned)}


def prepared_gpt2():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=100, n_positions=16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerate.Accelerator().prepare(model, optimizer)
    trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
    lm_head, wte = model.lm_head.weight, model.transformer.wte.weight
    return {"tied": lm_head is wte, "lm_head_trained": id(lm_head) in trained, "wte_trained": id(wte) in trained}


# No patch for tied weights: torch's swap switch, which the worker turns on, keeps them through prepare's move.
from opentc_launcher.xla.parameters import keep_parameters_on_move  # noqa: E402

keep_parameters_on_move(False)
without_switch = prepared_gpt2()
keep_parameters_on_move(True)
out["accelerate_ties"] = {"without_switch": without_switch, "with_switch": prepared_gpt2()}
json.dump(out, sys.stdout)

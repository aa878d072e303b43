"""The library patches (opentc_launcher.xla.library_patches): each one's target still exists and still reads from
the device in the installed library version, the patch removes the read without changing the result, and a
target that changed is refused rather than patched blindly."""

import json
import logging
import subprocess
import sys
import types

import pytest

from conftest import BIN, SCRIPTS, clean_env
from opentc_launcher import era_patches
from opentc_launcher.patching import LibraryChange, NotNeeded, TargetChanged, apply
from opentc_launcher.xla import library_patches

pytestmark = [pytest.mark.slow, pytest.mark.xla]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """tests/scripts/patch_targets.py on real torch-xla: each target unpatched, then patched."""
    proc = subprocess.run([str(BIN / "python"), str(SCRIPTS / "patch_targets.py")],
                          env=clean_env(PJRT_DEVICE="CPU", USE_TORCH_XLA="1"),
                          cwd=str(tmp_path_factory.mktemp("targets")), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_attention_masks_are_built_on_the_device_instead_of_read_back(measured):
    masks = measured["masks"]
    assert masks["applied"] is True   # the installed transformers still has the code the patch was written for
    # If this fails, transformers no longer reads the padding mask back: the patch is obsolete, remove it.
    assert masks["unpatched"] == {"host_reads": 1, "executions": 1}
    assert masks["unpatched_skips_mask"]
    assert masks["patched"] == {"host_reads": 0, "executions": 0}
    assert masks["patched_mask_is_causal"]   # the same attention, from a mask built on the device


def test_single_process_loss_gather_skips_the_rendezvous(measured):
    gather = measured["gather"]
    assert gather["applied"] is True
    # If this fails, the Trainer's gather no longer rendezvouses with itself: the patch is obsolete, remove it.
    assert gather["unpatched"]["host_reads"] >= 1 and gather["unpatched"]["executions"] >= 2
    assert gather["patched"] == {"host_reads": 0, "executions": 0}
    assert gather["same_result"]


def test_save_file_writes_xla_tensors(measured):
    saving = measured["safetensors"]
    assert saving["applied"] is True
    # If this fails, safetensors saves XLA tensors itself: the patch is obsolete, remove it.
    assert saving["unpatched_error"] == "Attempted to access the data pointer on an invalid python storage."
    assert saving["patched_error"] is None and saving["round_trip"] and saving["caller_dict_untouched"]


def test_accelerate_tells_tied_xla_tensors_apart(measured):
    ids = measured["accelerate_ids"]
    assert ids["applied"] is True
    # If this fails, accelerate handles XLA tensors itself: the patch is obsolete, remove it.
    assert ids["unpatched_error"] == "Attempted to access the data pointer on an invalid python storage."
    assert ids["patched_keys"] == ["bias", "wte"]    # the tied duplicate dropped, the other tensor kept


def test_accelerate_prepare_keeps_tied_weights_on_xla_with_torchs_swap_switch(measured):
    """Why no patch is needed for ties: without the switch the worker turns on, prepare's move unties GPT-2's
    lm_head and only wte trains; with it, both are one parameter, in the optimizer."""
    ties = measured["accelerate_ties"]
    assert ties["without_switch"] == {"tied": False, "lm_head_trained": False, "wte_trained": True}
    assert ties["with_switch"] == {"tied": True, "lm_head_trained": True, "wte_trained": True}


@pytest.mark.parametrize("patch", library_patches.PATCHES + era_patches.PATCHES, ids=lambda p: p.name)
def test_a_target_that_changed_is_refused_and_logged(patch, caplog):
    changed = types.ModuleType(patch.module)
    changed.is_tracing = lambda tensor=None: False
    changed._ignore_causal_mask_sdpa = changed._ignore_bidirectional_mask_sdpa = lambda *a: True
    changed.nested_xla_mesh_reduce = lambda tensors, name: tensors
    with pytest.raises(TargetChanged) as refused:
        patch.apply(changed)
    with caplog.at_level(logging.DEBUG, logger="opentc_launcher"):
        assert apply(patch, changed) is False
    # A version that never had the problem is passed over quietly; a target that changed is warned about.
    said = "not needed for" if isinstance(refused.value, NotNeeded) else "not applied"
    assert f"library patch {patch.name} {said}" in caplog.text
    assert changed.is_tracing(object()) is False and changed.nested_xla_mesh_reduce(1, "x") == 1   # untouched


def test_a_patch_waits_for_its_module_to_be_imported(tmp_path, monkeypatch, caplog):
    (tmp_path / "opentc_patch_target.py").write_text("VALUE = 'original'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    seen = []

    def apply(module):
        seen.append(module.VALUE)
        module.VALUE = "patched"

    patch = LibraryChange(name="test-patch", module="opentc_patch_target", target="opentc_patch_target.VALUE",
                          why="a test", apply=apply)
    with caplog.at_level(logging.INFO, logger="opentc_launcher"):
        assert library_patches.install((patch,)) == ["test-patch"]
        assert seen == [] and "opentc_patch_target" not in sys.modules   # nothing imported early
        import opentc_patch_target
    try:
        assert seen == ["original"] and opentc_patch_target.VALUE == "patched"
        assert "library patch test-patch applied" in caplog.text
    finally:
        sys.modules.pop("opentc_patch_target", None)

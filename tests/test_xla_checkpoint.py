"""Gradient checkpointing on XLA (the library patch torch-checkpoint-xla-rng): torch.utils.checkpoint fails on XLA
tensors without it, and with it gives the gradients of the same computation without checkpointing, dropout
included, with use_reentrant True and False; a Trainer job with gradient_checkpointing=True trains on XLA with eager's
losses."""

import json
import logging
import subprocess

import pytest
import torch

from conftest import BIN, SCRIPTS, clean_env, run_train
from opentc_launcher.patching import apply
from opentc_launcher.xla import device_module, library_patches
from opentc_launcher.xla.library_patches import TORCH_CHECKPOINT_XLA_RNG

pytestmark = [pytest.mark.slow, pytest.mark.xla]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """tests/scripts/checkpoint_on_xla.py on real torch-xla: checkpointing unpatched, then patched."""
    proc = subprocess.run([str(BIN / "python"), str(SCRIPTS / "checkpoint_on_xla.py")],
                          env=clean_env(PJRT_DEVICE="CPU"), cwd=str(tmp_path_factory.mktemp("checkpoint")),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_checkpointing_on_xla_fails_without_the_patch(measured):
    # If this fails, torch or torch-xla registers a device module for XLA itself: the patch is obsolete, remove it.
    assert measured["unpatched_error"] == {"True": "module 'torch' has no attribute 'xla'",
                                           "False": "module 'torch' has no attribute 'xla'"}
    assert measured["applied"] is True and measured["device_module"] == device_module.__name__


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpointed_gradients_are_those_without_checkpointing(measured, use_reentrant):
    assert 0.4 < measured["dropped_share"] < 0.6   # dropout drew masks that matter (p=0.5)
    run = measured[f"use_reentrant={use_reentrant}"]
    # The recompute drew the forward's dropout masks: the same graph's values, to the last bit.
    assert run["vs_plain"] == 0.0, run
    assert run["rng_state_after_backward_as_plain"] is True, run
    # Eager PyTorch on the CPU, given the masks XLA drew: the same gradients to float rounding.
    assert measured["plain_vs_eager"] < 1e-6 and run["vs_eager"] < 1e-6, measured
    # Without the RNG state stashed, the recompute draws other masks: the comparison above would see it.
    assert run["without_rng_state_vs_plain"] > 0.01 * measured["reference_gradient_size"], run


def test_fork_rng_puts_the_xla_state_back_and_steps_make_no_new_graphs(measured):
    assert measured["fork_rng_puts_the_state_back"] is True
    assert measured["graphs_compiled_by_three_more_steps"] == 0, measured


def test_a_torch_that_registers_its_own_xla_module_is_left_alone(monkeypatch, caplog):
    import torch.utils.checkpoint as checkpoint

    theirs = object()
    monkeypatch.setattr(torch, "xla", theirs, raising=False)
    with caplog.at_level(logging.WARNING, logger="opentc_launcher"):
        assert apply(TORCH_CHECKPOINT_XLA_RNG, checkpoint) is False
    assert "library patch torch-checkpoint-xla-rng not applied: torch.xla exists already" in caplog.text
    assert torch.xla is theirs


def test_the_device_module_offers_what_torchs_rng_forking_asks_for():
    """Read from the installed torch's checkpoint.py and random.py: the names the patch checks before registering."""
    used = library_patches.device_module_names_used()
    assert {"get_rng_state", "set_rng_state", "device", "_initialized", "device_count"} <= used, used
    assert used <= set(device_module.__all__), used


# A Trainer job with gradient_checkpointing=True, as transformers' own default runs it (use_reentrant=False), on
# XLA and eager. Dropout is off here: XLA and the CPU draw different masks from the same seed, so only a model
# without dropout can be compared across them (the recompute's masks are held to the forward's above). Each logged
# loss may differ by the share of its value test_same_model.py allows between XLA and eager, for the same reasons
# (measured here: 3e-7 at most over these 8 steps).
STEPS, LOGGING_STEPS = 8, 2
RELATIVE_TOLERANCE = 0.02
NO_DROPOUT = "resid_pdrop=0.0,embd_pdrop=0.0,attn_pdrop=0.0"


def checkpointed_trainer_job(make_job, compiler: bool, **extra):
    job = make_job(script="run_clm_tiny.py")
    job.set_hyperparameters(
        output_dir=str(job.model), max_steps=STEPS, logging_steps=LOGGING_STEPS, per_device_train_batch_size=4,
        learning_rate=0.003, save_strategy="no", report_to="none", optim="adamw_torch", dataloader_drop_last=True,
        block_size=64, seed=0, config_overrides=NO_DROPOUT, gradient_checkpointing=True,
        sagemaker_training_compiler_enabled=compiler, **extra)
    return job


def trained(make_job, compiler: bool) -> tuple[list[float], str, dict | None]:
    """The logged losses, the log and (compiler on) the compile report of a checkpointed Trainer job."""
    job = checkpointed_trainer_job(make_job, compiler)
    result = run_train(job)
    assert result.returncode == 0, result.output[-6000:]
    metrics = job.read_json("output/data/trainer_metrics.json")
    assert metrics["gradient_checkpointing"] is True and metrics["torch_xla_imported"] is compiler, metrics
    assert metrics["device"].startswith("xla" if compiler else "cpu"), metrics
    return metrics["losses"], result.output, job.compile_report() if compiler else None


def test_a_trainer_job_with_gradient_checkpointing_trains_on_xla_with_eagers_losses(make_job):
    eager_losses, _, _ = trained(make_job, compiler=False)
    xla_losses, log, report = trained(make_job, compiler=True)
    assert "library patch torch-checkpoint-xla-rng applied" in log
    assert len(eager_losses) == len(xla_losses) == STEPS // LOGGING_STEPS, (eager_losses, xla_losses)
    for e, x in zip(eager_losses, xla_losses, strict=True):
        assert x == pytest.approx(e, rel=RELATIVE_TOLERANCE), (eager_losses, xla_losses)
    assert xla_losses[-1] < xla_losses[0], xla_losses   # it trained
    # Checkpointing costs no host read and no graph a Trainer job without it does not have (tests/test_hf_trainer.py):
    # the RNG state it stashes is a seed torch-xla keeps on the host.
    assert report is not None and report["optimizer_steps"] == STEPS, report
    assert report["steps_with_host_reads"] <= STEPS // LOGGING_STEPS - 1, report
    assert report["graphs_compiled"] <= 5 and report["findings"] == [], report


def test_without_the_library_patches_gradient_checkpointing_fails_on_xla(make_job):
    """What the patch fixes, in a job: the same script with the patches off stops in its first forward pass."""
    job = checkpointed_trainer_job(make_job, compiler=True, sagemaker_training_compiler_library_patches=False)
    result = run_train(job)
    assert result.returncode != 0, result.output[-6000:]
    assert "AttributeError: module 'torch' has no attribute 'xla'" in (job.failure or ""), result.output[-6000:]

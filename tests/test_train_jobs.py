"""Whole jobs through the real `train` entry, on real torch-xla (PJRT_DEVICE=CPU) and real files."""

import json
import os

import pytest

from conftest import run_train, sample_run

pytestmark = [pytest.mark.slow, pytest.mark.xla]


def assert_loss_fell(losses):
    assert len(losses) >= 3, losses
    assert losses[-1] < losses[0] * 0.8, losses


def test_tiny_gpt2_trains_on_xla_and_saves(run_once):
    job, result = sample_run(run_once, compiler=True)    # the sample job as it is: its one run in this test run
    assert result.returncode == 0, result.output[-5000:]
    assert "Found configuration for Training Compiler" in result.output
    assert "Configuring SM Training Compiler..." in result.output
    assert "Reporting training SUCCESS" in result.output
    assert job.succeeded and job.failure is None
    metrics = job.read_json("output/data/metrics.json")
    assert metrics["device"].startswith("xla"), metrics
    assert_loss_fell([m["loss"] for m in metrics["losses"]])
    assert (job.model / "model.safetensors").stat().st_size > 100_000
    assert json.loads((job.model / "config.json").read_text())["n_layer"] == 2
    assert (job.model / "tokenizer.json").exists()
    # The sample follows the compiler's rules: its compile report is clean, and says so in one line.
    report = job.read_json("output/data/compiler/compile-report-rank0.json")
    assert report["findings"] == [] and report["graphs_compiled"] >= 1, report
    assert "compile report:" in result.output and "clean." in result.output


def test_compiler_disabled_runs_plain_pytorch_and_never_touches_xla(run_once):
    job, result = sample_run(run_once, compiler=False)
    assert result.returncode == 0, result.output[-5000:]
    assert "Configuring SM Training Compiler" not in result.output
    assert "USE_TORCH_XLA=0" in result.output
    metrics = job.read_json("output/data/metrics.json")
    assert metrics["device"] == "cpu"
    assert metrics["torch_xla_imported"] is False
    assert_loss_fell([m["loss"] for m in metrics["losses"]])
    assert job.succeeded


def test_debug_mode_leaves_artefacts_in_output_data_compiler(make_job):
    job = make_job()
    job.set_hyperparameters(sagemaker_training_compiler_debug_mode=True, max_steps=4, log_every=2)
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    assert "Training Compiler set to debug mode" in result.output
    assert f"Debug artifacts will be saved in {job.compiler_output}" in result.output
    metrics_file = job.compiler_output / "XLA_METRICS_FILE.txt"
    assert "CompileTime" in metrics_file.read_text()
    saved = list(job.compiler_output.glob("XLA_SAVE_TENSORS_FILE.hlo*"))   # torch-xla adds the ordinal
    assert saved and saved[0].stat().st_size > 0
    dumps = os.listdir(job.compiler_output / "xla_dump")
    assert any(name.endswith(".txt") for name in dumps), dumps
    # PT_XLA_DEBUG_LEVEL's compilation analysis reaches the job's log
    assert "Compilation Analysis" in result.output


def test_user_variables_win_over_compiler_defaults(make_job):
    """Debug mode on one XLA all-reduce (tests/scripts/xla_all_reduce.py): the user's XLA_FLAGS and debug mode's
    dumps together; the sample's debug mode is the test above."""
    job = make_job(script="xla_all_reduce.py", sagemaker_training_compiler_debug_mode=True)
    result = run_train(job, XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    assert result.returncode == 0, result.output[-5000:]
    # Issue 40: their flags stay and debug mode's dump folder joins them (they set none), said in the log
    assert ("rank0: found pre-existing configuration XLA_FLAGS=--xla_cpu_enable_fast_math=false: keeping it, "
            f"with --xla_dump_to={job.compiler_output}/xla_dump added") in result.output
    dumps = os.listdir(job.compiler_output / "xla_dump")
    assert any(name.endswith(".txt") for name in dumps), dumps
    assert (job.compiler_output / "XLA_METRICS_FILE.txt").exists()   # the other debug switches still apply

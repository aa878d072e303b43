"""A Hugging Face Trainer script in the run_clm style, through the real `train` entry, on XLA:CPU."""

from conftest import run_train


def trainer_job(make_job, **extra):
    job = make_job()
    job.use_script("run_clm_tiny.py")
    job.drop_script_hyperparameters()
    job.set_hyperparameters(
        output_dir=str(job.model), max_steps=12, per_device_train_batch_size=4, learning_rate=0.003,
        logging_steps=3, save_strategy="no", report_to="none", optim="adamw_torch",
        dataloader_drop_last=True, block_size=64, seed=0, **extra)
    return job


def test_trainer_run_clm_style_trains_on_xla_and_saves(make_job):
    job = trainer_job(make_job)
    result = run_train(job)
    assert result.returncode == 0, result.output[-6000:]
    assert "Found configuration for Training Compiler" in result.output
    metrics = job.read_json("output/data/trainer_metrics.json")
    assert metrics["device"].startswith("xla"), metrics
    assert metrics["torch_xla_imported"] is True
    losses = metrics["losses"]
    assert len(losses) >= 3 and losses[-1] < losses[0], losses
    assert (job.model / "model.safetensors").exists() and (job.model / "tokenizer.json").exists()
    assert job.succeeded
    report = job.read_json("output/data/compiler/compile-report-rank0.json")
    assert report["graphs_compiled"] >= 2
    # The Trainer compiles a few graphs at its first logging step: a burst, not a recompilation stream.
    assert not any("input shapes are changing" in f["problem"] for f in report["findings"]), report

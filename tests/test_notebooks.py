"""AWS's Training Compiler notebooks (../shared/seeds: GPT-2 on SST-2, the blog; GPT-2 on wikitext, multi-node), ported
to this image as docs/migrating-from-training-compiler.md shows: each notebook's native baseline and compiled job,
through the real `train`, on job folders written as the SageMaker Python SDK v2 writes them, then opentc-compare with
a price, as the notebooks' analysis.

CPU only: two CPU workers stand in for a GPU instance's (OPENTC_WORKERS_PER_HOST=2), the data set and the tokenizer
are channels instead of downloads from the hub, the model is a tiny GPT-2 (run_clm's --config_overrides), and the
script is tests/scripts/run_clm_tiny.py, which takes the run_clm.py arguments the notebooks pass (run_clm.py itself is
not on PyPI). What the SDK sends for each estimator was read off sagemaker 2.257's hyperparameters()."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import BIN, SAMPLE_JOB, clean_env, new_job, run_train

pytestmark = [pytest.mark.slow, pytest.mark.xla]

# The notebooks' hyperparameters for run_clm.py, as the migration page ports them to transformers 5
# (evaluation_strategy is eval_strategy; overwrite_output_dir is gone).
BLOG = {"model_type": "gpt2", "tokenizer_name": "gpt2", "dataset_name": "glue", "dataset_config_name": "sst2",
        "do_train": True, "do_eval": False, "fp16": True, "per_device_eval_batch_size": 8, "num_train_epochs": 100,
        "block_size": 512, "save_strategy": "no", "eval_strategy": "no", "logging_strategy": "epoch",
        "output_dir": "/opt/ml/model", "dataloader_drop_last": True}
WIKITEXT = {"model_type": "gpt2", "tokenizer_name": "gpt2", "dataset_name": "wikitext",
            "dataset_config_name": "wikitext-103-v1", "do_train": True, "do_eval": False, "num_train_epochs": 3,
            "block_size": 512, "save_strategy": "no", "eval_strategy": "no", "logging_strategy": "epoch",
            "output_dir": "/opt/ml/model", "dataloader_drop_last": True, "preprocessing_num_workers": 12}
NOTEBOOKS = {"blog": BLOG, "wikitext": WIKITEXT}
# What the estimators add, as the SDK sends them: the baselines' distributions and, for the compiled jobs, what
# TrainingCompilerConfig() and distribution={"pytorchxla": ...} would have sent (the SDK refuses them with a custom
# image, so the page passes them as hyperparameters).
PYTORCH_DDP = {"sagemaker_distributed_dataparallel_enabled": True, "sagemaker_instance_type": "ml.p4d.24xlarge",
               "sagemaker_distributed_dataparallel_custom_mpi_options": ""}    # PyTorch(pytorchddp), smdistributed
HF_PYTORCH_DDP = {"sagemaker_pytorch_ddp_enabled": True, "sagemaker_instance_type": "ml.p4d.24xlarge"}
TORCH_DISTRIBUTED = {"sagemaker_torch_distributed_enabled": True, "sagemaker_instance_type": "ml.p4d.24xlarge"}
COMPILED = {"sagemaker_training_compiler_enabled": True, "sagemaker_training_compiler_debug_mode": False,
            "sagemaker_pytorch_xla_multi_worker_enabled": True}
EAGER = {"sagemaker_training_compiler_enabled": False}

# Made local and small for a CPU: the data and the tokenizer from channels, a tiny GPT-2, a dozen steps. The
# learning rate scales with the global batch as the notebooks scale it (from a tiny model's rate, not GPT-2's).
STEPS, LOGGING_STEPS = 12, 4
LOCAL = {"tokenizer_name": "/opt/ml/input/data/tokenizer", "train_file": "/opt/ml/input/data/train/train.txt",
         "block_size": 64, "config_overrides": "n_layer=2,n_head=2,n_embd=64,n_positions=64",
         "max_steps": STEPS, "logging_strategy": "steps", "logging_steps": LOGGING_STEPS, "report_to": "none",
         "seed": 0}
LEARNING_RATE_PER_SAMPLE = 0.003 / 8
GLOBAL_BATCH = 8


def port(notebook: dict, workers: int) -> dict:
    """A notebook's hyperparameters with the data and the tokenizer local and the model tiny."""
    ported = {k: v for k, v in notebook.items() if k not in ("dataset_name", "dataset_config_name")}
    ported.update(LOCAL, per_device_train_batch_size=GLOBAL_BATCH // workers,
                  learning_rate=LEARNING_RATE_PER_SAMPLE * GLOBAL_BATCH)
    return ported


def make_channels(root):
    """The train channel (the sample's text, eight times over: 112 blocks of 64 tokens) and a tokenizer channel
    (a byte-level BPE trained on it and saved as run_clm.py's --tokenizer_name loads it), in `root`."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    text = (SAMPLE_JOB / "input" / "data" / "train" / "notes.txt").read_text() * 8
    (root / "train").mkdir(parents=True)
    (root / "train" / "train.txt").write_text(text)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([line for line in text.splitlines() if line.strip()], vocab_size=400,
                            special_tokens=["<|endoftext|>"])
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>").save_pretrained(root / "tokenizer")
    return root


@pytest.fixture(scope="module")
def channels(tmp_path_factory):
    return make_channels(tmp_path_factory.mktemp("channels"))


def sdk_job(root, channels, name: str, hyperparameters: dict):
    """A job folder as SDK v2 local mode writes it: hyperparameters JSON-encoded beside sagemaker_program and
    sagemaker_job_name, two channels; /opt/ml paths point into this folder, as they would in the container."""
    job = new_job(root / name, script="run_clm_tiny.py")
    base = str(job.root)
    job.set_hyperparameters(sagemaker_job_name=name, **{
        k: v.replace("/opt/ml", base) if isinstance(v, str) else v for k, v in hyperparameters.items()})
    shutil.rmtree(job.root / "input" / "data")
    shutil.copytree(channels, job.root / "input" / "data")
    (job.config / "inputdataconfig.json").write_text(json.dumps(
        {name: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"} for name in ("train",
                                                                                                 "tokenizer")}))
    return job


def losses(job) -> list[float]:
    return job.read_json("output/data/trainer_metrics.json")["losses"]


def fp16_said(summary: dict) -> bool:
    """Whether the job summary says that fp16 does nothing on a CPU (never silently: it changes nothing here)."""
    return any(f.startswith("fp16 mixed precision does nothing on a CPU") for f in summary["findings"])


@pytest.fixture(scope="module")
def baselines(tmp_path_factory, channels):
    """The notebooks' native baselines on two workers (PyTorch(distribution={"pytorchddp": ...}) in the blog;
    HuggingFace's pytorchddp sends its own keys), and the torch_distributed job they must equal, with the wikitext
    notebook's hyperparameters (no fp16). The wikitext notebook's own baseline, {"smdistributed": {"dataparallel":
    ...}}, sends the blog's keys: the blog's job is its run too (the same losses, seen here, 2026-11-28)."""
    root = tmp_path_factory.mktemp("baselines")
    jobs = {
        "blog": sdk_job(root, channels, "blog-native", {**port(BLOG, 2), **PYTORCH_DDP, **EAGER}),
        "huggingface": sdk_job(root, channels, "hf-native", {**port(BLOG, 2), **HF_PYTORCH_DDP, **EAGER}),
        "torch_distributed": sdk_job(root, channels, "reference",
                                     {**port(WIKITEXT, 2), **TORCH_DISTRIBUTED, **EAGER}),
    }
    results = {name: run_train(job, OPENTC_WORKERS_PER_HOST="2") for name, job in jobs.items()}
    return jobs, results


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, channels):
    """The notebooks' compiled jobs: XLA (the xla image's default), one worker per GPU (one on a CPU host);
    the blog's with fp16, the wikitext notebook's without."""
    root = tmp_path_factory.mktemp("compiled")
    jobs = {name: sdk_job(root, channels, f"{name}-compiled", {**port(notebook, 1), **COMPILED})
            for name, notebook in NOTEBOOKS.items()}
    return jobs, {name: run_train(job) for name, job in jobs.items()}


@pytest.mark.parametrize("name", ["blog", "huggingface"])
def test_a_notebooks_native_baseline_trains_as_pytorch_ddp_with_the_torch_distributed_loss(baselines, name):
    jobs, results = baselines
    job, result = jobs[name], results[name]
    assert result.returncode == 0, result.output[-4000:]
    key = "sagemaker_pytorch_ddp_enabled" if name == "huggingface" else "sagemaker_distributed_dataparallel_enabled"
    assert f"launching 2 worker(s) on this host (node 0 of 1, rendezvous on 127.0.0.1; asked by {key})" in result.output
    assert f"{key}=true asks for " in result.output and "runs as PyTorch DDP" in result.output
    reference = jobs["torch_distributed"]
    assert results["torch_distributed"].returncode == 0, results["torch_distributed"].output[-4000:]
    assert len(losses(job)) == STEPS // LOGGING_STEPS
    assert losses(job) == pytest.approx(losses(reference), rel=1e-6), (losses(job), losses(reference))
    summary = job.read_json("output/data/job-summary.json")
    assert summary["workers"] == 2 and summary["optimizer_steps"] == STEPS
    assert fp16_said(summary), summary["findings"]      # both baselines have the blog's fp16


def test_the_wikitext_notebooks_job_without_fp16_trains_on_two_workers_and_hears_nothing_of_fp16(baselines):
    """The torch_distributed job the baselines equal has the wikitext notebook's hyperparameters: no fp16, so no
    finding about it (the blog's, with fp16, has one)."""
    jobs, results = baselines
    result = results["torch_distributed"]
    assert result.returncode == 0, result.output[-4000:]
    assert "launching 2 worker(s) on this host" in result.output
    summary = jobs["torch_distributed"].read_json("output/data/job-summary.json")
    assert summary["workers"] == 2 and summary["optimizer_steps"] == STEPS
    assert not fp16_said(summary), summary["findings"]


def test_the_compiled_job_with_fp16_on_xla_reads_nothing_back_per_step_and_matches_fp32(compiled):
    jobs, results = compiled
    for name, result in results.items():
        assert result.returncode == 0, (name, result.output[-4000:])
    fp16, fp32 = jobs["blog"], jobs["wikitext"]
    assert "fp16 on XLA: the Trainer's optimizer is torch-xla's sync-free AdamW" in results["blog"].output
    report = fp16.compile_report(0)
    # Only the logging steps read the loss back (steps 4 and 8 are inside the run; step 12's log comes after it).
    assert report["steps_with_host_reads"] <= STEPS // LOGGING_STEPS - 1, report
    assert report["findings"] == [] and report["loss_scaling_host_checks"] == {}, report
    assert fp16.read_json("output/data/trainer_metrics.json")["device"].startswith("xla")
    assert losses(fp16) == pytest.approx(losses(fp32), rel=2e-2), (losses(fp16), losses(fp32))
    assert fp16.read_json("output/data/job-summary.json")["findings"] == []


def test_the_notebooks_analysis_is_one_command(baselines, compiled, tmp_path):
    """Throughput, loss, training time and cost side by side, with the break-even of the compilation."""
    native, compiled_job = baselines[0]["blog"], compiled[0]["blog"]
    result = subprocess.run([str(BIN / "opentc-compare"), str(native.root), str(compiled_job.root),
                             "--price-per-hour", "37.688", "--plot", str(tmp_path / "notebook.png")],
                            env=clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    table = result.stdout
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in table.splitlines()
            if line.startswith("| ")}
    assert rows[""][0] == "eager (blog-native)" and rows[""][1].startswith("xla (blog-compiled)")
    for row in ("samples/s", "final loss", "wall time (s)", "cost (USD at 37.688/h per host)", "saving vs first (USD)",
                "compile paid back vs first after"):
        assert row in rows, (row, table)
    assert rows["saving vs first (USD)"][0] == "-"
    assert "fp16 mixed precision does nothing on a CPU" in table.split("Findings:", 1)[1]
    assert (tmp_path / "notebook.png").stat().st_size > 0
    print(table)

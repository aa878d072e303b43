"""AWS's own Training Compiler example folders (aws/amazon-sagemaker-examples, sagemaker-training-compiler/huggingface/
pytorch_*), byte for byte (tests/third_party/amazon-sagemaker-examples, PROVENANCE.md), each as its notebook ran it:
its scripts folder as the code channel, its requirements.txt (transformers 4.38 or 4.25.1) installed by the toolkit,
the notebook's hyperparameters as the SageMaker Python SDK v2 sends them, through the real `train`.

Made local and small for a CPU, and nothing else changed: the data sets and tokenizers are channels instead of hub
downloads, the models tiny (a config, or a folder saved from one, in place of the hub's model name), XLA on CPU for
the compiled jobs. Each job runs in an overlay Python over the test venv (tests/overlay.py), so the transformers 4.x
its requirements install never reach the venv. Needs PyPI, as a SageMaker job that installs requirements.txt does.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from overlay import era_tokenizer, overlay_python

from conftest import BIN, REPO, SAMPLE_JOB, new_job, run_train

pytestmark = [pytest.mark.slow, pytest.mark.xla]

AWS = REPO / "tests" / "third_party" / "amazon-sagemaker-examples" / "sagemaker-training-compiler" / "huggingface"
GPT2_NOTEBOOK = AWS / "pytorch_multiple_gpu_single_node" / "language-modeling" / "scripts"
SINGLE_GPU = AWS / "pytorch_single_gpu_single_node"
MULTI_NODE = AWS / "pytorch_multiple_gpu_multiple_node" / "scripts"

# What TrainingCompilerConfig() and distribution={"pytorchxla": ...} sent (the SDK refuses them with a custom image;
# the migration page passes them as hyperparameters), and the native baselines' distribution.
COMPILED = {"sagemaker_training_compiler_enabled": True, "sagemaker_training_compiler_debug_mode": False,
            "sagemaker_pytorch_xla_multi_worker_enabled": True}
NATIVE = {"sagemaker_training_compiler_enabled": False}
# gpt-2.ipynb's hyperparameters (a75d5f2), with the hub's data set and tokenizer as channels and the model tiny.
GPT2_HYPERPARAMETERS = {
    "model_type": "gpt2", "do_train": True, "do_eval": False, "fp16": True, "num_train_epochs": 100,
    "block_size": 64, "overwrite_output_dir": True, "save_strategy": "no", "evaluation_strategy": "no",
    "logging_strategy": "steps", "logging_steps": 2, "output_dir": "/opt/ml/model", "dataloader_drop_last": True,
    "preprocessing_num_workers": 12, "per_device_train_batch_size": 8, "learning_rate": float("1e-5") / 32 * 8 * 300,
    "tokenizer_name": "/opt/ml/input/data/tokenizer", "train_file": "/opt/ml/input/data/train/train.txt",
    "config_overrides": "n_layer=2,n_head=2,n_embd=64,n_positions=64", "max_steps": 6, "seed": 0,
    "report_to": "none"}
TEXT = (SAMPLE_JOB / "input" / "data" / "train" / "notes.txt").read_text() * 8


def folder_job(root: Path, scripts: Path, program: str, hyperparameters: dict, channels: dict[str, Path]):
    """A job folder as SDK v2 writes it: the scripts folder as its code, byte for byte, and the channels."""
    job = new_job(root)
    shutil.rmtree(job.root / "code")
    shutil.copytree(scripts, job.root / "code")
    shutil.rmtree(job.root / "input" / "data")
    for name, source in channels.items():
        shutil.copytree(source, job.root / "input" / "data" / name)
    base = str(job.root)
    sent = {"sagemaker_program": program, "sagemaker_job_name": root.name,
            **{k: v.replace("/opt/ml", base) if isinstance(v, str) else v for k, v in hyperparameters.items()}}
    (job.config / "hyperparameters.json").write_text(json.dumps({k: json.dumps(v) for k, v in sent.items()}))
    (job.config / "inputdataconfig.json").write_text(json.dumps(
        {name: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"} for name in channels}))
    return job


def run_in(train: Path, job, **env: str):
    """`train` from the overlay, its Python first on PATH (a script's own `python -m ...` finds it); its log beside
    the job folder (train.log), for a reader of a failure."""
    result = run_train(job, timeout=1500, command=train, PATH=f"{train.parent}{os.pathsep}{BIN}{os.pathsep}"
                       f"{os.environ.get('PATH', '')}", **env)
    (job.root.parent / f"{job.root.name}-train.log").write_text(result.output)
    return result


def losses(job) -> list[float]:
    return [p["loss"] for p in job.read_json("output/data/job-summary.json")["loss"]["points"]]


# -- the GPT-2 notebook (pytorch_multiple_gpu_single_node/language-modeling): run_clm.py, transformers 4.38 ---------
@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt2-notebook")
    train = overlay_python(root / "python")
    channels = root / "channels"
    (channels / "train").mkdir(parents=True)
    (channels / "train" / "train.txt").write_text(TEXT)
    era_tokenizer(TEXT, channels / "tokenizer")
    channel_map = {"train": channels / "train", "tokenizer": channels / "tokenizer"}
    compiled = folder_job(root / "compiled", GPT2_NOTEBOOK, "run_clm.py", {**GPT2_HYPERPARAMETERS, **COMPILED},
                          channel_map)
    # The native baseline ran on a GPU; transformers 4.38 refuses fp16 on a CPU, as it would have on a CPU instance.
    native = folder_job(root / "native", GPT2_NOTEBOOK, "run_clm.py",
                        {**GPT2_HYPERPARAMETERS, **NATIVE, "fp16": False}, channel_map)
    return train, {"compiled": (compiled, run_in(train, compiled)), "native": (native, run_in(train, native))}


def test_the_gpt2_notebooks_folder_trains_as_shipped_compiled_with_fp16(gpt2):
    """requirements.txt pins transformers==4.38.0: the toolkit installs it with a datasets and a huggingface-hub that
    go with it (pip check passes), and the compiled job with fp16 trains on XLA as it did on Training Compiler."""
    _, runs = gpt2
    job, result = runs["compiled"]
    assert result.returncode == 0, result.output[-5000:]
    assert "requirements.txt asks for transformers==4.38.0: the image's" in result.output
    assert "library patch transformers-4-fp16-on-xla applied to transformers 4.38.0" in result.output
    assert "library patch accelerate-takes-transformers-4-dataloader-arguments applied" in result.output
    assert "fp16 on XLA: the Trainer's optimizer is torch-xla's sync-free AdamW" in result.output
    summary = job.read_json("output/data/job-summary.json")
    assert summary["backend"] == "xla" and summary["versions"]["transformers"] == "4.38.0"
    assert summary["optimizer_steps"] == GPT2_HYPERPARAMETERS["max_steps"]


def test_the_gpt2_notebooks_native_baseline_trains_with_the_compiled_jobs_losses(gpt2):
    _, runs = gpt2
    (native, result), (compiled, _) = runs["native"], runs["compiled"]
    assert result.returncode == 0, result.output[-5000:]
    assert "library patch transformers-4-reads-use-torch-xla applied to transformers 4.38.0" in result.output
    assert native.read_json("output/data/job-summary.json")["backend"] == "eager"
    assert losses(native) == pytest.approx(losses(compiled), rel=2e-2), (losses(native), losses(compiled))


def test_the_multi_node_notebooks_run_clm_trains_compiled_as_shipped(gpt2, tmp_path):
    """language-modeling-multi-gpu-multi-node.ipynb (a75d5f2): its own run_clm.py and requirements.txt (transformers
    4.38), the wikitext hyperparameters (no fp16), compiled; one host of the notebook's two here."""
    train, runs = gpt2
    channels = runs["compiled"][0].root / "input" / "data"
    hyperparameters = {k: v for k, v in GPT2_HYPERPARAMETERS.items() if k != "fp16"}
    job = folder_job(tmp_path / "multi-node", MULTI_NODE, "run_clm.py",
                     {**hyperparameters, "learning_rate": float("5e-5") / 32 * 8 * 300, **COMPILED},
                     {"train": channels / "train", "tokenizer": channels / "tokenizer"})
    result = run_in(train, job)
    assert result.returncode == 0, result.output[-5000:]
    summary = job.read_json("output/data/job-summary.json")
    assert summary["backend"] == "xla" and summary["optimizer_steps"] == GPT2_HYPERPARAMETERS["max_steps"]


# -- the single-GPU notebooks (bert-base-cased, roberta-base, albert-base-v2): a Trainer script, transformers 4.25.1 --
# Each notebook: {"epochs": ..., "train_batch_size": ..., "model_name": <the hub's>, "learning_rate": ...}, the
# compiled job's batch and rate (a75d5f2); the model name is a folder channel here, the data sets (saved with
# save_to_disk, tokenized, as each notebook uploads them) channels as in the notebooks.
SEQUENCE = 32


def tiny_model(kind: str, folder: Path) -> Path:
    """A tiny model of the notebook's family with an era-neutral tokenizer (vocab.txt, or vocab.json and merges.txt),
    saved as a hub folder is."""
    import transformers
    from tokenizers import BertWordPieceTokenizer

    folder.mkdir(parents=True)
    lines = [line for line in TEXT.splitlines() if line.strip()]
    if kind == "roberta":
        era_tokenizer(TEXT, folder)
        (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
        config = transformers.RobertaConfig(vocab_size=400, max_position_embeddings=SEQUENCE + 2)
    else:
        wordpiece = BertWordPieceTokenizer(lowercase=False)
        wordpiece.train_from_iterator(lines, vocab_size=400)
        wordpiece.save_model(str(folder))
        (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                                  "do_lower_case": False}))
        config = (transformers.AlbertConfig(vocab_size=400, embedding_size=16, max_position_embeddings=SEQUENCE)
                  if kind == "albert" else transformers.BertConfig(vocab_size=400, max_position_embeddings=SEQUENCE))
    config.update({"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64})
    model_class = (transformers.AlbertForQuestionAnswering if kind == "albert" else
                   transformers.RobertaForSequenceClassification if kind == "roberta" else
                   transformers.BertForSequenceClassification)
    transformers.set_seed(0)
    model_class(config).save_pretrained(folder)
    return folder


def tokenized_sets(kind: str, folder: Path, samples: int) -> dict[str, Path]:
    """The train and test channels: ids of the sample's words, labels (a class, or an answer's span)."""
    import random

    from datasets import Dataset

    rng = random.Random(0)
    rows = {"input_ids": [[rng.randrange(5, 400) for _ in range(SEQUENCE)] for _ in range(samples)],
            "attention_mask": [[1] * SEQUENCE for _ in range(samples)]}
    if kind == "albert":
        rows["start_positions"] = [rng.randrange(SEQUENCE // 2) for _ in range(samples)]
        rows["end_positions"] = [s + rng.randrange(SEQUENCE // 2) for s in rows["start_positions"]]
    else:
        rows["labels"] = [rng.randrange(2) for _ in range(samples)]
    channels = {}
    for name in ("train", "test"):
        Dataset.from_dict(rows).save_to_disk(str(folder / name))
        channels[name] = folder / name
    return channels


SINGLE_GPU_NOTEBOOKS = {
    # folder, script, the compiled job's hyperparameters (epochs as the notebook, a batch a CPU can take)
    "bert": ("bert-base-cased", "train.py", {"epochs": 4, "train_batch_size": 8}),
    "roberta": ("roberta-base", "fine_tune_with_huggingface.py", {"epochs": 4, "train_batch_size": 8}),
    "albert": ("albert-base-v2", "qa_trainer_huggingface.py", {"epochs": 4, "n_gpus": 1,
                                                               "output_dir": "/opt/ml/model", "train_batch_size": 8}),
}


@pytest.fixture(scope="module")
def single_gpu_python(tmp_path_factory):
    """One overlay for the three folders: they pin the same transformers 4.25.1 (the first job installs it)."""
    return overlay_python(tmp_path_factory.mktemp("single-gpu") / "python")


@pytest.mark.parametrize("notebook", sorted(SINGLE_GPU_NOTEBOOKS))
def test_a_single_gpu_notebooks_folder_trains_compiled_as_shipped(notebook, single_gpu_python, tmp_path):
    """transformers 4.25.1, scikit-learn for the metrics (in the image, as in AWS's), fp16=True in the script's
    TrainingArguments: the compiled job trains on XLA, evaluates and saves."""
    folder, script, hyperparameters = SINGLE_GPU_NOTEBOOKS[notebook]
    model = tiny_model(notebook, tmp_path / "model-channel")
    channels = {**tokenized_sets(notebook, tmp_path / "data", samples=16), "model": model}
    job = folder_job(tmp_path / notebook, SINGLE_GPU / folder / "scripts", script,
                     {**hyperparameters, "model_name": "/opt/ml/input/data/model",
                      "learning_rate": float("5e-5") / 32 * hyperparameters["train_batch_size"], **COMPILED},
                     channels)
    result = run_in(single_gpu_python, job)
    assert result.returncode == 0, result.output[-5000:]
    assert "library patch transformers-4-fp16-on-xla applied to transformers 4.25.1" in result.output
    summary = job.read_json("output/data/job-summary.json")
    assert summary["backend"] == "xla" and summary["versions"]["transformers"] == "4.25.1"
    assert summary["optimizer_steps"] == hyperparameters["epochs"] * 16 // hyperparameters["train_batch_size"]
    assert (job.root / "output" / "data" / "eval_results.txt").read_text().count(" = ") >= 2
    assert any((job.model).glob("*.bin")) or any(job.model.glob("*.safetensors"))


# -- the launchers: an entry point that starts its own workers ---------------------------------------------------------
# language-modeling-multi-gpu-single-node.ipynb (4d08453): the native baseline's entry point is
# launch_pt_dt_sm_native.py, which runs `python -m torch.distributed.launch ... <training_script>` itself. Its
# run_clm.py cannot run that way on torch 2 (its launcher passes --local-rank, which no transformers' parser takes:
# the migration page says so), so the script it starts here is one that takes it; two CPU workers stand in for the
# notebook's GPUs (its n_gpus).
def test_an_entry_point_that_starts_its_own_workers_trains_and_its_summary_says_what_it_cannot_count(tmp_path):
    code = tmp_path / "scripts"
    code.mkdir()
    shutil.copy(GPT2_NOTEBOOK / "launch_pt_dt_sm_native.py", code)
    shutil.copy(REPO / "tests" / "scripts" / "ddp_trainer_for_a_launcher.py", code)
    job = folder_job(tmp_path / "native-launcher", code, "launch_pt_dt_sm_native.py",
                     {"training_script": "ddp_trainer_for_a_launcher.py", "n_gpus": 2, "max_steps": 6, **NATIVE},
                     {})
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    summary = job.read_json("output/data/job-summary.json")
    assert summary["workers"] is None and summary["optimizer_steps"] is None, summary
    assert summary["step_seconds"]["median"] is None and summary["throughput"]["samples_per_second"] is None
    assert summary["findings"][0].startswith("the script started processes of its own that did the work"), summary
    assert [p["step"] for p in summary["loss"]["points"]] == list(range(6))   # what they printed is kept
    assert "workers unknown; optimizer steps unknown" in result.output


# -- the multi-node notebook's smdistributed baseline ---------------------------------------------------------------
def test_the_smdistributed_baseline_is_refused_naming_what_to_use_instead(gpt2, tmp_path):
    """run_clm_smddp.py (65d5a59) imports smdistributed.dataparallel, which exists only in AWS's images."""
    train, runs = gpt2
    channels = runs["compiled"][0].root / "input" / "data"
    job = folder_job(tmp_path / "smddp", MULTI_NODE, "run_clm_smddp.py",
                     {**GPT2_HYPERPARAMETERS, **NATIVE, "fp16": False,
                      "sagemaker_distributed_dataparallel_enabled": True},
                     {"train": channels / "train", "tokenizer": channels / "tokenizer"})
    result = run_in(train, job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 1, result.output[-3000:]
    reason = job.failure.split("\n")[1]
    assert reason.startswith("the script imports smdistributed, SageMaker's distributed training libraries"), reason
    assert 'Use torch.distributed with backend="nccl"' in reason, reason


# -- the vision transformer notebook (vision-transformer-p4-fp32.ipynb, 4d08453): run_mim.py ---------------------------
# Its requirements.txt names accelerate only, for the transformers of AWS's image (4.21); run_mim.py imports
# send_example_telemetry (gone in 4.57), the notebook passes evaluation_strategy (gone in 4.46) and the script
# passes load_dataset use_auth_token (gone in datasets 3): the migration page's change is two pins,
# `transformers==4.45.*` and `datasets<3`. The notebook's hyperparameters as it wrote them (its compiled
# job's), its MNIST a channel of PNG files here (datasets' imagefolder), the ViT tiny, one batch of 4.
VISION = AWS / "pytorch_multiple_gpu_single_node" / "vision_transformer" / "scripts"


def test_the_vision_transformer_folder_trains_compiled_with_the_pages_two_pins(tmp_path):
    import random

    from PIL import Image

    scripts = tmp_path / "scripts"
    shutil.copytree(VISION, scripts)
    with open(scripts / "requirements.txt", "a") as f:
        f.write("\ntransformers==4.45.*\ndatasets<3\n")   # the page's change; the folder's own line stays as it was
    rng = random.Random(0)
    for digit in ("0", "1"):
        (tmp_path / "mnist" / "train" / digit).mkdir(parents=True)
        for i in range(8):
            image = Image.new("L", (32, 32))
            image.putdata([rng.randrange(256) for _ in range(32 * 32)])
            image.save(tmp_path / "mnist" / "train" / digit / f"{i}.png")
    train = overlay_python(tmp_path / "python")
    job = folder_job(tmp_path / "vit", scripts, "run_mim.py", {
        "model_type": "vit", "dataset_name": "imagefolder", "train_dir": "/opt/ml/input/data/train/**",
        "output_dir": "/opt/ml/model", "overwrite_output_dir": True, "remove_unused_columns": "False",
        "label_names": "bool_masked_pos", "do_train": True, "do_eval": False, "learning_rate": 2e-5 / 8 * 4,
        "weight_decay": 0.05, "num_train_epochs": 1, "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 4, "logging_strategy": "epoch", "evaluation_strategy": "no",
        "save_strategy": "no", "save_total_limit": 3, "mask_patch_size": 8, "seed": 0, "report_to": "none",
        "config_overrides": "image_size=32,patch_size=4,encoder_stride=4,hidden_size=32,num_hidden_layers=2,"
                            "num_attention_heads=2,intermediate_size=64",
        "sagemaker_pytorch_xla_multi_worker_enabled": True, **COMPILED},
        {"train": tmp_path / "mnist" / "train"})
    result = run_in(train, job)
    assert result.returncode == 0, result.output[-5000:]
    summary = job.read_json("output/data/job-summary.json")
    assert summary["backend"] == "xla" and summary["versions"]["transformers"].startswith("4.45.")
    assert summary["optimizer_steps"] > 0

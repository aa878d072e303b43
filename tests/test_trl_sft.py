"""TRL's own SFT script (tests/third_party/trl/sft.py, v1.9.0, unchanged) fine-tuning with PEFT LoRA and TRL's
defaults, gradient checkpointing among them, through the real `train`: eager, XLA and Inductor give the same losses.
trl and peft come as a user's would, from the job's requirements.txt, installed by the toolkit under the stack's pins
(dev/setup has installed the same pins in a folder of their own, which the jobs here have on PYTHONPATH, so the
toolkit's pip finds them there, and the other tests' jobs do not import peft);
the model and the data set are local folders given as channels (nothing from a hub)."""

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, SAMPLE_JOB, SCRIPTS, clean_env, run_train

pytestmark = [pytest.mark.slow, pytest.mark.xla, pytest.mark.inductor]

TRL = Path(__file__).resolve().parent / "third_party" / "trl"
SFT, REQUIREMENTS = TRL / "sft.py", TRL / "requirements.txt"   # trl and peft, pinned (dev/setup installs them too)
TRL_SITE = BIN.parent / "trl-site"                              # where: dev/setup
STEPS = 6
# The LoRA recipe of sft.py's docstring (its learning rate, --use_peft; r and alpha smaller for a tiny model) and
# TRL's defaults otherwise (gradient_checkpointing=True, lora_dropout 0.05, its chunked loss), but for what a CPU
# needs: bf16 off (TRL's default bf16=True refuses a machine without a GPU) and every batch padded to one length, so
# that XLA compiles one graph for it (TRL pads each batch to its longest example by default).
RECIPE = {"use_peft": True, "lora_r": 8, "lora_alpha": 16, "learning_rate": 2e-4, "per_device_train_batch_size": 4,
          "max_steps": STEPS, "logging_steps": 1, "report_to": "none", "dataloader_drop_last": True,
          "bf16": False, "max_length": 64, "pad_to_multiple_of": 64, "seed": 0}
# Each logged loss may differ by this share of eager's, as in test_same_model.py (XLA and Inductor reorder float
# operations; LoRA's dropout draws other masks on XLA). Measured: at most 0.02 %, the last digit TRL logs.
RELATIVE_TOLERANCE = 0.02
BACKENDS = {"eager": {"sagemaker_training_compiler_enabled": False},
            "xla": {"sagemaker_training_compiler_backend": "xla"},
            "inductor": {"sagemaker_training_compiler_backend": "inductor"}}


@pytest.fixture(scope="module")
def sft_inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sft-inputs")
    proc = subprocess.run([str(BIN / "python"), str(SCRIPTS / "sft_inputs.py"),
                           str(SAMPLE_JOB / "input" / "data" / "train" / "notes.txt"), str(folder / "model"),
                           str(folder / "train")], env=clean_env(USE_TORCH_XLA="0"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder


def sft_job(make_job, sft_inputs: Path, backend: str):
    job = make_job(backend)
    job.drop_script_hyperparameters()
    data = job.root / "input" / "data"
    shutil.rmtree(data / "train")
    for channel in ("train", "model"):
        shutil.copytree(sft_inputs / channel, data / channel)
    channels = json.loads((job.config / "inputdataconfig.json").read_text())
    (job.config / "inputdataconfig.json").write_text(json.dumps({**channels, "model": channels["train"]}))
    shutil.copy(SFT, job.root / "code" / "sft.py")
    shutil.copy(REQUIREMENTS, job.root / "code" / "requirements.txt")
    job.set_hyperparameters(sagemaker_program="sft.py", model_name_or_path=str(data / "model"),
                            dataset_name=str(data / "train"), output_dir=str(job.model), **RECIPE,
                            **BACKENDS[backend])
    return job


def test_trls_sft_script_with_lora_has_eagers_losses_on_xla_and_inductor(make_job, sft_inputs):
    assert (TRL_SITE / "trl").is_dir() and (TRL_SITE / "peft").is_dir(), f"no trl and peft in {TRL_SITE}: run dev/setup"
    losses = {}
    for backend in BACKENDS:
        job = sft_job(make_job, sft_inputs, backend)
        result = run_train(job, PYTHONPATH=str(TRL_SITE))
        assert result.returncode == 0 and job.succeeded, result.output[-6000:]
        summary = job.read_json("output/data/job-summary.json")
        assert summary["backend"] == backend, summary["backend"]
        losses[backend] = [point["loss"] for point in summary["loss"]["points"]]
        assert (job.model / "adapter_config.json").exists()   # LoRA trained and saved its adapter
        if backend == "xla":
            assert "library patch torch-checkpoint-xla-rng applied" in result.output
    assert len(losses["eager"]) == STEPS, losses
    for backend in ("xla", "inductor"):
        for eager, compiled in zip(losses["eager"], losses[backend], strict=True):
            assert compiled == pytest.approx(eager, rel=RELATIVE_TOLERANCE), losses


def test_the_upstream_script_is_kept_byte_for_byte():
    provenance = dict(line.split(":", 1) for line in (TRL / "PROVENANCE").read_text().splitlines() if ":" in line)
    assert hashlib.sha256(SFT.read_bytes()).hexdigest() == provenance["sha256"].strip()
    assert provenance["tag"].strip() == "v1.9.0" and "trl==1.9.0" in REQUIREMENTS.read_text().split()

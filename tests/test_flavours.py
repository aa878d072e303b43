"""Two image flavours from one Dockerfile: their pins (stacks/<flavour>.txt, read by dev/flavour), the Dockerfile's
defaults (the xla flavour's), and the toolkit deciding by what is installed, never by an image's tag.

The images themselves are tested in tests/container/; here `train` runs on this machine's venv (the xla stack), with
torch_xla made unimportable (conftest.no_torch_xla) to stand for the inductor image.
"""

import re
import subprocess

import pytest

from conftest import REPO, no_torch_xla, run_train

FLAVOUR = REPO / "dev" / "flavour"


def flavour(*args: str) -> str:
    return subprocess.run([str(FLAVOUR), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_every_flavour_has_a_stack_file_with_its_header_and_torch():
    assert flavour("list").split() == ["xla", "inductor"]
    for name in ("xla", "inductor"):
        assert flavour(name, "flavour") == name
        assert re.fullmatch(r"[0-9]+\.[0-9]+", flavour(name, "cuda"))
        assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", flavour(name, "torch"))
    assert flavour("inductor", "packages").split() == ["torch", "torchvision"]   # torchvision is built for one torch
    assert "torch-xla" in flavour("xla", "packages").split()


def test_tags_say_what_is_inside_as_aws_tags_do():
    torch, cuda = flavour("inductor", "torch"), flavour("inductor", "cuda").replace(".", "")
    assert flavour("inductor", "tag") == f"{torch}-inductor-gpu-py311-cu{cuda}-debian12-sagemaker"
    assert flavour("xla", "tag", "0.2.0").endswith("-xla-gpu-py311-cu126-debian12-sagemaker-v0.2.0")


def test_the_dockerfiles_defaults_are_the_xla_flavours():
    """`docker build .` with no arguments is the xla image: its ARG defaults are what dev/flavour gives for xla."""
    dockerfile = (REPO / "Dockerfile").read_text()
    defaults = dict(re.findall(r"^ARG ([A-Z_]+)=(\S+)$", dockerfile, re.MULTILINE))
    wanted = dict(line.split("=", 1) for line in flavour("xla", "build-args").splitlines())
    assert {key: defaults.get(key) for key in wanted} == wanted
    inductor = dict(line.split("=", 1) for line in flavour("inductor", "build-args").splitlines())
    assert inductor["TORCH_XLA_VERSION"] == inductor["XLA_CUDA"] == "none"


def test_the_shared_pins_hold_no_torch_and_each_stack_pins_its_own():
    shared = (REPO / "constraints.txt").read_text()
    assert not re.search(r"^(torch|torch-xla|jax-cuda12-pjrt|nvidia-[a-z0-9-]+)==", shared, re.MULTILINE)
    assert flavour("xla", "torch") != flavour("inductor", "torch")


def compiler_job(make_job, **hyperparameters):
    return make_job(script="argv_echo.py", sagemaker_training_compiler_enabled=True, **hyperparameters)


@pytest.mark.slow
def test_where_torch_xla_is_installed_the_compiler_is_xla_and_the_log_says_why(make_job):
    job = compiler_job(make_job, sagemaker_training_compiler_max_compilations=0)
    result = run_train(job)
    assert result.returncode == 0, result.output[-3000:]
    assert ("Configuring SM Training Compiler... (sagemaker_training_compiler_backend not set: xla (PyTorch/XLA is "
            "installed here (the xla image), so XLA is the default") in result.output


@pytest.mark.slow
def test_without_torch_xla_the_compiler_is_inductor_and_the_log_says_why(make_job, tmp_path):
    job = compiler_job(make_job)
    result = run_train(job, PYTHONPATH=no_torch_xla(tmp_path / "blocker"))
    assert result.returncode == 0, result.output[-3000:]
    assert ("(sagemaker_training_compiler_backend not set: inductor (this image has no PyTorch/XLA (torch-xla), so "
            "TorchInductor (torch.compile) is its compiler))") in result.output
    assert "torch.compile (TorchInductor) ready on cpu" in result.output
    assert job.compile_report()["backend"] == "inductor"


@pytest.mark.parametrize("tag", ["2.7.0-xla-gpu-py311-cu126-debian12-sagemaker-v0.1.0", ""])
def test_without_torch_xla_the_xla_backend_is_refused_before_anything_runs(make_job, tmp_path, tag):
    job = compiler_job(make_job, sagemaker_training_compiler_backend="xla")
    result = run_train(job, PYTHONPATH=no_torch_xla(tmp_path / "blocker"), OPENTC_XLA_IMAGE_TAG=tag)
    assert result.returncode == 2, result.output[-3000:]
    assert job.failure.startswith('Training not started: hyperparameter sagemaker_training_compiler_backend="xla" '
                                  "cannot run in this image: PyTorch/XLA (the torch-xla package) is not installed "
                                  "here"), job.failure
    assert (f"use the xla image (tag {tag})" if tag else "use an image that has it") in job.failure
    assert 'leave sagemaker_training_compiler_backend unset or set it to "inductor"' in job.failure
    assert not (job.model / "argv.json").exists()


def test_the_compiler_off_needs_no_compiler_installed(make_job, tmp_path):
    job = compiler_job(make_job, sagemaker_training_compiler_backend="xla")
    job.set_hyperparameters(sagemaker_training_compiler_enabled=False)
    result = run_train(job, PYTHONPATH=no_torch_xla(tmp_path / "blocker"))
    assert result.returncode == 0, result.output[-3000:]

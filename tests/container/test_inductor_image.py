"""The inductor image (current torch, no torch-xla): it decides by what it has, not by its tag. The compiler on
with no backend named trains on TorchInductor and says why; XLA is refused before anything runs, naming the xla
image; and a driver too old for its CUDA stops the job before the script. (The Inductor backend's own tests, run
inside it on its torch: test_inductor_suite.py.)

No GPU here: the driver is a stub (nvidia-smi, libnvidia-ml.so.1 and libcuda.so.1 built with gcc, mounted where
the NVIDIA container runtime mounts the real ones) reporting one GPU and an older driver.
"""

import subprocess
from pathlib import Path

import pytest

from .conftest import files_under, image_sample_run, run_job

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[2]


def test_the_compiler_on_with_no_backend_named_trains_on_inductor_and_says_why(inductor_image, run_once):
    job, result = image_sample_run(run_once, inductor_image, compiler=True)   # shared with opentc-compare's test
    assert result.returncode == 0, result.output[-5000:]
    assert ("Configuring SM Training Compiler... (sagemaker_training_compiler_backend not set: inductor (this image "
            "has no PyTorch/XLA (torch-xla), so TorchInductor (torch.compile) is its compiler))") in result.output, \
        result.output[-5000:]
    assert "torch.compile (TorchInductor) ready on cpu" in result.output
    report = job.read_json("output/data/compiler/compile-report-rank0.json")
    assert report["backend"] == "inductor" and report["graphs_compiled"] >= 2, report
    summary = job.read_json("output/data/job-summary.json")
    assert summary["versions"]["torch"].startswith("2.14.") and summary["versions"]["torch-xla"] is None
    assert any(name.startswith("inductor-torch-2.14.") for name in files_under(job.checkpoints / "compile-cache"))


def test_the_xla_backend_is_refused_naming_the_xla_image(inductor_image, make_job, containers):
    job = make_job()
    job.set_hyperparameters(sagemaker_training_compiler_backend="xla")
    result = run_job(inductor_image, containers(), job)
    assert result.returncode == 2, result.output[-3000:]
    tag = subprocess.run([str(REPO / "dev" / "flavour"), "xla", "tag", _version()], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert job.failure.startswith('Training not started: hyperparameter sagemaker_training_compiler_backend="xla" '
                                  'cannot run in this image: PyTorch/XLA (the torch-xla package) is not installed '
                                  'here (this image has torch 2.14.1). For PyTorch/XLA, use the xla image (tag '
                                  f'{tag}); here, leave sagemaker_training_compiler_backend unset or set it to '
                                  '"inductor" to compile with torch.compile (TorchInductor).'), job.failure
    assert files_under(job.model) == [] and "Reporting training FAILURE" in result.output


STUB_DRIVER = r"""
#include <stdio.h>
#include <string.h>
int cuDriverGetVersion(int *version) { *version = 12040; return 0; }
int cuInit(unsigned int flags) { return 0; }
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 1; return 0; }
int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "550.54.15"); return 0;
}
"""


@pytest.fixture(scope="module")
def old_driver(tmp_path_factory):
    """A stand-in for a host's driver that supports CUDA 12.4 (R550) and one GPU: libcuda.so.1, libnvidia-ml.so.1 and
    nvidia-smi, in one folder."""
    folder = tmp_path_factory.mktemp("driver")
    (folder / "stub.c").write_text(STUB_DRIVER)
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1"):
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(folder / soname),
                        str(folder / "stub.c")], check=True)
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A10G (UUID: GPU-00000000-stub)'\n")
    smi.chmod(0o755)
    return folder


def test_a_driver_too_old_for_cuda_13_stops_the_job_before_the_script(inductor_image, make_job, containers,
                                                                      old_driver):
    job = make_job()
    path = "/opt/stub-driver:/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"   # nvidia-smi, as the runtime mounts it
    result = run_job(inductor_image, containers(), job, "-v", f"{old_driver}:/opt/stub-driver:ro",
                     "-e", "LD_LIBRARY_PATH=/opt/stub-driver", "-e", f"PATH={path}")
    assert result.returncode == 2, result.output[-5000:]
    failure = job.failure
    assert failure.startswith("Training not started: the host's NVIDIA driver 550.54.15 supports CUDA 12.4; this "
                              "image's torch 2.14.1 is built for CUDA 13.0"), failure
    assert "a driver for CUDA 13.x (Linux 580.65.06 or later)" in failure
    assert "or use the xla image (tag 2.7.0-xla-gpu-py311-cu126-debian12-sagemaker" in failure
    assert "metrics.json" not in files_under(job.output)          # the script never started


def _version() -> str:
    text = (REPO / "toolkit" / "pyproject.toml").read_text()
    return next(line.split('"')[1] for line in text.splitlines() if line.startswith("version = "))

"""A device a launch cannot use is refused the same way wherever the choice was made: `opentc-run` and
`opentc-worker` (on its own, or handed options by some other launcher) check it against the same GPU count, read
from NVML as torch reads it, without importing torch before the script.

No GPU exists here: a stub driver built with gcc stands in for the driver's libraries, libnvidia-ml.so.1 and
libcuda.so.1 (loaded through LD_LIBRARY_PATH, as the NVIDIA container runtime mounts the real ones), reporting the
GPUs STUB_NVML_GPUS says, the CUDA version STUB_CUDA_DRIVER says (default 13.0) and the driver version
STUB_DRIVER_VERSION says, the name and compute capability STUB_GPU_NAME and STUB_COMPUTE_CAPABILITY say (none without
them) and 81559 MiB (or crashing there with STUB_NVML_CRASH, never answering with STUB_NVML_HANG); and nvidia-smi,
which sagemaker-training counts GPUs with.
"""

import json
import subprocess
import sys

import pytest

from conftest import BIN, SCRIPTS, clean_env

STUB = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <unistd.h>
static unsigned int gpus(void) {
    const char *n = getenv("STUB_NVML_GPUS"); return n ? (unsigned) strtoul(n, 0, 10) : 0;
}
int nvmlInit_v2(void) { return getenv("STUB_NVML_BROKEN") ? 1 : 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = gpus(); return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    if (index >= gpus()) return 2;
    *handle = (void *) (size_t) (index + 1); return 0;
}
int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned int length) {
    snprintf(uuid, length, "GPU-%04zu-stub", (size_t) handle - 1); return 0;
}
int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    const char *v = getenv("STUB_DRIVER_VERSION"); snprintf(version, length, "%s", v ? v : "580.65.06"); return 0;
}
int nvmlDeviceGetName(void *handle, char *name, unsigned int length) {
    const char *n = getenv("STUB_GPU_NAME"); if (!n) return 3; snprintf(name, length, "%s", n); return 0;
}
typedef struct { unsigned long long total, free, used; } memory_t;
int nvmlDeviceGetMemoryInfo(void *handle, memory_t *memory) {
    if (getenv("STUB_NVML_CRASH")) { volatile int *nowhere = 0; *nowhere = 1; }
    if (getenv("STUB_NVML_HANG")) sleep(600);
    memory->total = 81559ULL << 20; memory->free = memory->total; memory->used = 0; return 0;
}
int nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) {
    const char *c = getenv("STUB_COMPUTE_CAPABILITY"); if (!c) return 3;
    *major = atoi(c) / 10; *minor = atoi(c) % 10; return 0;
}
int cuDriverGetVersion(int *version) {
    const char *v = getenv("STUB_CUDA_DRIVER"); *version = v ? atoi(v) : 13000; return 0;
}
"""


@pytest.fixture(scope="module")
def nvml(tmp_path_factory):
    """A folder holding the stub libnvidia-ml.so.1."""
    folder = tmp_path_factory.mktemp("driver")
    (folder / "stub.c").write_text(STUB)
    for soname in ("libnvidia-ml.so.1", "libcuda.so.1"):
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(folder / soname),
                        str(folder / "stub.c")], check=True)
    smi = folder / "nvidia-smi"
    smi.write_text('#!/bin/sh\ni=0\nwhile [ "$i" -lt "${STUB_NVML_GPUS:-0}" ]; do echo "GPU $i: NVIDIA A10G"; '
                   'i=$((i + 1)); done\n')
    smi.chmod(0o755)
    return folder


def driver_env(nvml, gpus, **extra):
    env = clean_env(LD_LIBRARY_PATH=str(nvml), STUB_NVML_GPUS=str(gpus), **extra)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(extra)
    return env


def counted(env) -> int:
    done = subprocess.run([sys.executable, "-c", "from opentc_launcher.gpus import visible_gpu_count as c; "
                                                 "import sys; print(c(), 'torch' in sys.modules)"],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    count, torch_imported = done.stdout.split()
    assert torch_imported == "False"      # counting never imports torch
    return int(count)


@pytest.mark.parametrize(("visible", "expected"), [
    (None, 2), ("", 0), ("1", 1), ("0,1", 2), ("1,0,5", 2), ("5,0", 0), ("0,0", 0), ("0,-1,1", 1), ("1gpu", 1),
    ("GPU-0001", 1), ("GPU-0001-stub,GPU-0000", 2), ("GPU-00", 0), ("GPU-0001,0", 1), ("GPU-9", 0), ("MIG-a,MIG-b", 2),
], ids=lambda v: repr(v))
def test_gpus_are_counted_as_torch_counts_them(nvml, visible, expected):
    extra = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert counted(driver_env(nvml, 2, **extra)) == expected


def test_no_driver_means_no_gpu(nvml):
    assert counted(driver_env(nvml, 2, STUB_NVML_BROKEN="1")) == 0     # NVML does not start
    env = clean_env()
    env.pop("LD_LIBRARY_PATH", None)
    env["LD_LIBRARY_PATH"] = str(nvml.parent / "nowhere")
    if subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout.count("libnvidia-ml.so.1") == 0:
        assert counted(env) == 0                                       # no library at all (a machine without GPUs)


REFUSED = [
    ("eager", "cuda", "no GPU visible: device cuda asks for plain PyTorch on a GPU"),
    ("inductor", "cuda", "no GPU visible: device cuda asks for TorchInductor on a GPU"),
    ("xla", "cuda", "no GPU visible: PJRT_DEVICE=CUDA asks for XLA:CUDA"),
    ("inductor", "tpu", "device 'tpu' is not accepted for TorchInductor: use cuda or cpu"),
    ("eager", "tpu", "device 'tpu' is not accepted for plain PyTorch: use cuda or cpu"),
]


@pytest.mark.parametrize("launcher", ["opentc-worker", "opentc-run"])
@pytest.mark.parametrize(("backend", "device", "expected"), REFUSED, ids=[f"{b}-{d}" for b, d, _ in REFUSED])
def test_a_device_the_launch_cannot_use_is_refused_by_every_launcher(nvml, tmp_path, launcher, backend, device,
                                                                     expected):
    error_file = tmp_path / "error.json"
    prefix = [BIN / "opentc-worker"] if launcher == "opentc-worker" else \
        [BIN / "opentc-run", "--standalone", "--nproc-per-node", "1", "--failure-report", error_file]
    argv = [*prefix, "--backend", backend, "--device", device, "--compile-report-dir", tmp_path / "report",
            SCRIPTS / "argv_echo.py"]
    scratch = tmp_path / "tmp"   # the launcher's temporary folders (TMPDIR)
    scratch.mkdir()
    env = driver_env(nvml, 0, SM_MODEL_DIR=str(tmp_path), TORCHELASTIC_ERROR_FILE=str(error_file),
                     TMPDIR=str(scratch))
    result = subprocess.run([str(a) for a in argv], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=120)
    assert result.returncode == 2, result.stdout[-3000:]
    assert expected in result.stdout, result.stdout[-3000:]
    assert not (tmp_path / "argv.json").exists()              # the script never ran
    assert not (tmp_path / "report").exists()                 # and no report names a device it never used
    assert not list(scratch.iterdir())                        # nor did opentc-run leave a log folder behind
    record = json.loads(error_file.read_text())
    assert expected in json.dumps(record)


def test_a_device_the_worker_can_use_is_applied(nvml, tmp_path):
    """The positive side of the same check: with one GPU visible, `--device cuda` runs the script (which never
    touches the stub's GPU)."""
    result = subprocess.run([str(BIN / "opentc-worker"), "--backend", "eager", "--device", "cuda",
                             str(SCRIPTS / "argv_echo.py"), "--x", "1"],
                            env=driver_env(nvml, 1, SM_MODEL_DIR=str(tmp_path)), cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert json.loads((tmp_path / "argv.json").read_text()) == ["--x", "1"]


OLD_DRIVER = {"STUB_CUDA_DRIVER": "11080", "STUB_DRIVER_VERSION": "470.82.01"}


def old_driver_message() -> str:
    import importlib.metadata as metadata

    from opentc_launcher.cuda_driver import torch_cuda_version

    cuda = torch_cuda_version()
    assert cuda is not None, "this test needs a CUDA build of torch (PyPI's)"
    return (f"the host's NVIDIA driver 470.82.01 supports CUDA 11.8; this image's torch "
            f"{metadata.version('torch').split('+')[0]} is built for CUDA {cuda[0]}.{cuda[1]}, which needs a driver "
            f"for CUDA {cuda[0]}.x (Linux ")


@pytest.mark.parametrize("launcher", ["opentc-worker", "opentc-run"])
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_driver_too_old_for_torchs_cuda_is_refused_before_the_script(nvml, tmp_path, launcher, backend):
    error_file = tmp_path / "error.json"
    prefix = [BIN / "opentc-worker"] if launcher == "opentc-worker" else \
        [BIN / "opentc-run", "--standalone", "--nproc-per-node", "1", "--failure-report", error_file]
    env = driver_env(nvml, 1, SM_MODEL_DIR=str(tmp_path), TORCHELASTIC_ERROR_FILE=str(error_file), **OLD_DRIVER)
    result = subprocess.run([str(a) for a in [*prefix, "--backend", backend, "--device", "cuda",
                                              SCRIPTS / "argv_echo.py"]], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert result.returncode == 2, result.stdout[-3000:]
    assert old_driver_message() in result.stdout, result.stdout[-3000:]
    assert not (tmp_path / "argv.json").exists()


def test_a_job_on_a_host_whose_driver_is_too_old_stops_before_the_script(nvml, make_job):
    """Through `train`: sagemaker-training counts one GPU (nvidia-smi), the plan decides cuda, and the driver's
    CUDA 11.8 is refused before the script, with exit code 2 and the reason in output/failure."""
    from conftest import run_train

    job = make_job(script="argv_echo.py",
                   sagemaker_training_compiler_enabled=True, sagemaker_training_compiler_backend="inductor")
    env = driver_env(nvml, 1, **OLD_DRIVER)
    result = run_train(job, LD_LIBRARY_PATH=env["LD_LIBRARY_PATH"], STUB_NVML_GPUS="1",
                       PATH=f"{nvml}:{env['PATH']}", **OLD_DRIVER)
    assert result.returncode == 2, result.output[-3000:]
    assert job.failure.startswith("Training not started: " + old_driver_message()), job.failure
    assert not (job.model / "argv.json").exists()


@pytest.mark.parametrize("reported", ["0", "-5"])
def test_a_driver_that_reports_no_cuda_version_is_said_to(nvml, tmp_path, reported):
    """Issue 31 I: a driver whose cuDriverGetVersion gives 0 (or less) read 'supports CUDA 0.0' ('CUDA -1.99')."""
    env = driver_env(nvml, 1, SM_MODEL_DIR=str(tmp_path), STUB_CUDA_DRIVER=reported,
                     STUB_DRIVER_VERSION="470.82.01")
    result = subprocess.run([str(BIN / "opentc-worker"), "--backend", "eager", "--device", "cuda",
                             str(SCRIPTS / "argv_echo.py")], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert result.returncode == 2, result.stdout[-3000:]
    assert ("the host's NVIDIA driver 470.82.01 reports no CUDA version (cuDriverGetVersion gave 0 or less); this "
            "image's torch") in result.stdout, result.stdout[-3000:]
    assert "CUDA 0.0" not in result.stdout and "CUDA -" not in result.stdout


def probed(env, timeout: float = 60) -> dict:
    done = subprocess.run([sys.executable, "-c", "import json, sys; from opentc_launcher.host import probe_host; "
                                                 f"h = probe_host(timeout={timeout}); print(json.dumps([h.record(), "
                                                 "h.describe(), 'torch' in sys.modules]))"],
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    record, line, torch_imported = json.loads(done.stdout)
    assert not torch_imported                 # probing never imports torch
    return {**record, "line": line}


def test_the_host_record_is_what_the_driver_says_of_the_gpus_this_process_sees(nvml):
    """Issue 41 (3): one probe of the machine, with the GPUs' name, memory, compute capability and the driver."""
    h100 = probed(driver_env(nvml, 4, CUDA_VISIBLE_DEVICES="1,2", STUB_GPU_NAME="NVIDIA H100 80GB HBM3",
                             STUB_COMPUTE_CAPABILITY="90", STUB_CUDA_DRIVER="12040", STUB_DRIVER_VERSION="550.54.15"))
    assert {k: v for k, v in h100.items() if k not in ("cpus", "torch_cuda", "line")} == {
        "gpus": 2, "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": 81559, "compute_capability": "9.0",
        "bf16": True, "driver": "550.54.15", "driver_cuda": "12.4"}
    assert h100["cpus"] >= 1
    assert "2 x NVIDIA H100 80GB HBM3 (81559 MiB, compute capability 9.0, bf16); driver 550.54.15 (CUDA 12.4)" \
        in h100["line"]
    t4 = probed(driver_env(nvml, 1, STUB_GPU_NAME="Tesla T4", STUB_COMPUTE_CAPABILITY="75"))
    assert (t4["gpus"], t4["compute_capability"], t4["bf16"]) == (1, "7.5", False)
    unnamed = probed(driver_env(nvml, 1))     # a driver that names neither: unknown, never guessed
    assert (unnamed["gpu_name"], unnamed["compute_capability"], unnamed["bf16"]) == (None, None, None)
    assert "1 x GPU (name unknown) (81559 MiB)" in unnamed["line"]
    none = probed(driver_env(nvml, 0, STUB_NVML_BROKEN="1"))
    assert (none["gpus"], none["gpu_name"], none["bf16"]) == (0, None, None) and "no GPU" in none["line"]


def test_a_driver_library_that_crashes_or_hangs_describing_the_gpu_leaves_it_unknown(nvml):
    """Issue 51 (5): NVML is asked in a short-lived child, so a crash inside the driver's library (SIGSEGV in
    nvmlDeviceGetMemoryInfo) or a call that never returns leaves the GPU's figures unknown, with the reason, and
    keeps what the driver said before it; a count no host has is not believed."""
    crashed = probed(driver_env(nvml, 2, STUB_GPU_NAME="NVIDIA H100 80GB HBM3", STUB_NVML_CRASH="1"))
    assert (crashed["gpus"], crashed["gpu_name"], crashed["gpu_memory_mib"], crashed["driver"]) == (
        2, None, None, "580.65.06")
    assert "2 x GPU (name unknown) (unknown: the driver's library crashed describing the GPU (SIGSEGV))" in \
        crashed["line"], crashed["line"]
    hung = probed(driver_env(nvml, 1, STUB_NVML_HANG="1"), timeout=2)
    assert (hung["gpus"], hung["gpu_memory_mib"]) == (1, None)
    assert "(unknown: the driver's library did not answer within 2 s describing the GPU)" in hung["line"]
    implausible = probed(driver_env(nvml, 2**31, CUDA_VISIBLE_DEVICES="GPU-0001"))
    assert implausible["gpus"] == 0
    assert ("no GPU (unknown: the driver reported 2147483648 GPUs, more than any host has (at most 256 are "
            "believed))") in implausible["line"], implausible["line"]


def test_a_dry_run_on_a_driver_that_crashes_describes_the_machine_and_plans(nvml, make_job):
    """The dry run (and the job, which reads the machine the same way, job.read_job) went down with the driver's
    library, with no word."""
    from test_dry_run import dry_run

    job = make_job(script="argv_echo.py", sagemaker_training_compiler_enabled=False)
    env = driver_env(nvml, 1, STUB_NVML_CRASH="1")
    done = dry_run(job, LD_LIBRARY_PATH=env["LD_LIBRARY_PATH"], STUB_NVML_GPUS="1", STUB_NVML_CRASH="1",
                   PATH=f"{nvml}:{env['PATH']}")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "1 x GPU (name unknown) (unknown: the driver's library crashed describing the GPU (SIGSEGV))" in \
        done.stdout, done.stdout
    assert "the GPUs: unknown: the driver's library crashed describing the GPU (SIGSEGV); the job goes on with 1 " \
           "GPU(s) counted" in done.stderr, done.stderr[-3000:]


SPARSE_STUB = r"""
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 1; return 0; }
"""


def test_a_driver_library_without_the_device_functions_leaves_the_gpu_unknown(tmp_path):
    """A driver's NVML that exports only what counting needs (older drivers lack some functions; the image test's
    stand-in driver exports four) gives a host record with the figures unknown, never an error that stops the job."""
    (tmp_path / "stub.c").write_text(SPARSE_STUB)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o",
                    str(tmp_path / "libnvidia-ml.so.1"), str(tmp_path / "stub.c")], check=True)
    sparse = probed(driver_env(tmp_path, 1))
    assert (sparse["gpus"], sparse["gpu_name"], sparse["gpu_memory_mib"], sparse["driver"]) == (1, None, None, None)
    assert "1 x GPU (name unknown)" in sparse["line"]
    by_uuid = probed(driver_env(tmp_path, 1, CUDA_VISIBLE_DEVICES="GPU-0000"))   # no UUIDs to match: none seen
    assert by_uuid["gpus"] == 0

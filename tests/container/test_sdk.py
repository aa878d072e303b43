"""The image driven by the SageMaker Python SDK's local mode, the way users try an image before they submit it:
SDK v2's Estimator and SDK v3's ModelTrainer (docker-compose from Debian, offline: no AWS call).

Each SDK runs from its own venv (dev/sdk-envs) through tests/container/sdk_job.py. Mocked: nothing but AWS
itself (local mode never calls it here) and the GPU (jobs run on XLA:CPU).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_JOB, SCRIPTS, clean_env, wait_for

from .conftest import docker

pytestmark = pytest.mark.container

HERE = Path(__file__).resolve().parent
SDK_VENVS = {"v2": REPO / ".venv-sdk2", "v3": REPO / ".venv-sdk3"}


def sdk_python(sdk: str) -> str:
    python = SDK_VENVS[sdk] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: dev/sdk-envs creates it (dev/test runs it)", pytrace=False)
    return str(python)


def source(tmp_path: Path, *scripts: str) -> Path:
    folder = tmp_path / "src"
    folder.mkdir(exist_ok=True)
    for script in scripts:
        shutil.copy(SCRIPTS / script, folder / script)
    return folder


def sdk_command(sdk: str, image: str, root: Path, *options: str) -> list[str]:
    return [sdk_python(sdk), str(HERE / "sdk_job.py"), sdk, image, str(root), *options]


def sdk_env() -> dict[str, str]:
    # docker-compose and the docker CLI the SDK calls: Debian's, talking to the engine the tests use.
    env = clean_env()
    env["PATH"] = "/usr/bin:" + env["PATH"]
    return env


def run_sdk(sdk: str, image: str, root: Path, *options: str, timeout: float = 600) -> tuple[str | None, str]:
    """(what the SDK raised or None, what it printed, the container's log included)."""
    done = subprocess.run(sdk_command(sdk, image, root, *options), env=sdk_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-4000:]
    return json.loads((root / "result.json").read_text())["raised"], done.stdout


def hp(**values) -> list[str]:
    return [option for key, value in values.items() for option in ("--hp", f"{key}={json.dumps(value)}")]


def v3_artifact(root: Path, name: str) -> tarfile.TarFile:
    return tarfile.open(root / "compressed_artifacts" / name)


def test_v2_estimator_trains_the_sample_with_the_compiler(image, tmp_path):
    root = tmp_path / "v2"
    raised, out = run_sdk("v2", image, root, "--source", str(SAMPLE_JOB / "code"), "--entry-script", "train.py",
                          "--channel", f"train={SAMPLE_JOB / 'input' / 'data' / 'train'}",
                          *hp(sagemaker_training_compiler_enabled=True, max_steps=4, log_every=2))
    assert raised is None, out[-4000:]
    assert "Found configuration for Training Compiler" in out and "PyTorch/XLA on PJRT_DEVICE=CPU" in out
    with tarfile.open(root / "out" / "model.tar.gz") as model:
        assert "model.safetensors" in model.getnames()


def test_v2_torch_distributed_runs_one_worker_per_gpu_through_the_launcher(image, tmp_path):
    """The SDK v2's usual way to ask AWS's PyTorch containers for torchrun (sagemaker.pytorch.PyTorch), honoured:
    no GPU here, so OPENTC_WORKERS_PER_HOST stands in for the GPU count, as on a CPU instance."""
    root = tmp_path / "v2"
    raised, out = run_sdk("v2", image, root, "--source", str(source(tmp_path, "report_env.py")),
                          "--entry-script", "report_env.py",
                          "--distribution", '{"torch_distributed": {"enabled": true}}',
                          "--env", "OPENTC_WORKERS_PER_HOST=2", *hp(tag="x y"))
    assert raised is None, out[-4000:]
    assert "asked by sagemaker_torch_distributed_enabled" in out
    with tarfile.open(root / "out" / "model.tar.gz") as model:
        reports = [json.load(model.extractfile(f"env-rank{rank}.json")) for rank in range(2)]
    assert [(r["RANK"], r["WORLD_SIZE"]) for r in reports] == [("0", "2"), ("1", "2")]
    assert all(r["argv"] == ["--tag", "x y"] and r["all_reduce_sum"] == 3.0 for r in reports)


def test_v2_the_blog_notebooks_native_baseline_runs_as_pytorch_ddp(image, tmp_path):
    """AWS's GPT-2 notebook's baseline as docs/migrating-from-training-compiler.md ports it: the SDK's own
    PyTorch(distribution={"pytorchddp": ...}), which it sends as smdistributed's data parallelism, runs as PyTorch
    DDP on two workers (OPENTC_WORKERS_PER_HOST stands in for the GPUs); its output.tar.gz is what opentc-compare
    reads, with a price."""
    from test_notebooks import BLOG, make_channels, port

    data = make_channels(tmp_path / "data")
    root = tmp_path / "v2"
    raised, out = run_sdk("v2", image, root, "--source", str(source(tmp_path, "run_clm_tiny.py")),
                          "--entry-script", "run_clm_tiny.py",
                          "--distribution", '{"pytorchddp": {"enabled": true}}',
                          "--channel", f"train={data / 'train'}", "--channel", f"tokenizer={data / 'tokenizer'}",
                          "--env", "OPENTC_WORKERS_PER_HOST=2", *hp(**port(BLOG, 2)))
    assert raised is None, out[-4000:]
    assert "asked by sagemaker_distributed_dataparallel_enabled" in out and "runs as PyTorch DDP" in out, out[-4000:]
    with tarfile.open(root / "out" / "output.tar.gz") as output:
        summary = json.load(output.extractfile("data/job-summary.json"))
    assert summary["workers"] == 2 and summary["outcome"]["succeeded"], summary
    compared = docker("run", "--rm", "--network", "none", "-v", f"{root / 'out'}:/out:ro", image, "opentc-compare",
                      "/out/output.tar.gz", "--price-per-hour", "37.688")
    assert compared.returncode == 0, compared.stdout
    assert "| cost (USD at 37.688/h per host) | " in compared.stdout, compared.stdout


def test_v2_mpi_distribution_is_refused_naming_torch_distributed(image, tmp_path):
    root = tmp_path / "v2"
    raised, out = run_sdk("v2", image, root, "--source", str(source(tmp_path, "report_env.py")),
                          "--entry-script", "report_env.py",
                          "--distribution", '{"mpi": {"enabled": true, "processes_per_host": 2}}')
    assert raised is not None, out[-4000:]
    assert "hyperparameter sagemaker_mpi_enabled=true asks for distribution={\"mpi\": ...}" in out, out[-4000:]
    assert 'Use distribution={"torch_distributed": {"enabled": True}}' in out


def test_v3_entry_script_runs_through_train_with_the_compiler(image, tmp_path):
    root = tmp_path / "v3"
    raised, out = run_sdk("v3", image, root, "--source", str(source(tmp_path, "strict_args.py")),
                          "--entry-script", "strict_args.py",
                          *hp(sagemaker_training_compiler_enabled=True, epochs=1))
    assert raised is None, out[-4000:]
    assert "running it through the image's train" in out and "Found configuration for Training Compiler" in out
    with v3_artifact(root, "model.tar.gz") as model:
        record = json.load(model.extractfile("strict-args.json"))
    # the compiler's settings applied, no sagemaker_* key reached the script, tini is PID 1 again
    assert record == {"argv": ["--epochs", "1"], "epochs": 1, "PJRT_DEVICE": "CPU", "torch_xla_imported": True,
                      "pid1": "/usr/bin/tini"}, record


def test_v3_torchrun_with_multi_worker_runs_the_workers_through_the_launcher(image, tmp_path):
    root = tmp_path / "v3"
    raised, out = run_sdk("v3", image, root, "--source", str(source(tmp_path, "report_env.py")),
                          "--entry-script", "report_env.py", "--torchrun", "2",
                          *hp(sagemaker_training_compiler_enabled=True,
                              sagemaker_pytorch_xla_multi_worker_enabled=True,
                              sagemaker_training_compiler_cpu_multi_worker="unsynchronized", tag="x y"))
    assert raised is None, out[-4000:]
    assert "launching 2 worker(s) on this host" in out
    with v3_artifact(root, "model.tar.gz") as model:
        reports = [json.load(model.extractfile(f"env-rank{rank}.json")) for rank in range(2)]
    assert [(r["RANK"], r["WORLD_SIZE"], r["PJRT_DEVICE"]) for r in reports] == [("0", "2", "CPU"), ("1", "2", "CPU")]
    assert all(r["argv"] == ["--tag", "x y"] and r["all_reduce_sum"] == 3.0 for r in reports)


def test_v3_torchrun_alone_runs_the_workers_through_the_launcher(image, tmp_path):
    root = tmp_path / "v3"
    raised, out = run_sdk("v3", image, root, "--source", str(source(tmp_path, "report_env.py")),
                          "--entry-script", "report_env.py", "--torchrun", "2",
                          *hp(sagemaker_training_compiler_enabled=True,
                              sagemaker_training_compiler_cpu_multi_worker="unsynchronized"))
    assert raised is None, out[-4000:]
    assert "asked by ModelTrainer(distributed=Torchrun())" in out
    with v3_artifact(root, "model.tar.gz") as model:
        reports = [json.load(model.extractfile(f"env-rank{rank}.json")) for rank in range(2)]
    assert [(r["RANK"], r["WORLD_SIZE"]) for r in reports] == [("0", "2"), ("1", "2")]


def test_v3_code_in_a_channel_runs_train_and_never_reports_an_empty_success(image, tmp_path):
    code = source(tmp_path, "strict_args.py")
    root = tmp_path / "v3"
    raised, out = run_sdk("v3", image, root, "--channel", f"code={code}",
                          *hp(sagemaker_program="strict_args.py",
                              sagemaker_submit_directory="/opt/ml/input/data/code", epochs=2))
    assert raised is None, out[-4000:]
    assert "no command given and a job is mounted at /opt/ml: running train" in out
    with v3_artifact(root, "model.tar.gz") as model:
        assert json.load(model.extractfile("strict-args.json"))["argv"] == ["--epochs", "2"]
    # without the script's name, a clear failure instead of the help and an exit 0
    raised, out = run_sdk("v3", image, tmp_path / "v3-nothing", "--channel", f"code={code}")
    assert raised is not None and "exited with code: 2" in raised, out[-4000:]
    assert "no training script: set the hyperparameter sagemaker_program" in out


def test_v3_command_exec_train_is_the_recipe_that_needs_no_hook(image, tmp_path):
    root = tmp_path / "v3"
    raised, out = run_sdk("v3", image, root, "--source", str(source(tmp_path, "strict_args.py")),
                          "--command", "exec train",
                          *hp(sagemaker_program="strict_args.py", sagemaker_submit_directory="/opt/ml/input/data/code",
                              sagemaker_training_compiler_enabled=True, epochs=3))
    assert raised is None, out[-4000:]
    assert "running it through the image's train" not in out        # the user's command ran as given
    with v3_artifact(root, "model.tar.gz") as model:
        record = json.load(model.extractfile("strict-args.json"))
    assert record["argv"] == ["--epochs", "3"] and record["PJRT_DEVICE"] == "CPU"


def test_a_stop_reaches_a_v3_entry_script_job(image, tmp_path):
    """SageMaker stops a job with SIGTERM to the container's PID 1: under the SDK's bash entrypoint that signal
    would be dropped (bash as PID 1 has no handler) and the job SIGKILLed; handed to train, tini is PID 1."""
    root = tmp_path / "v3"
    sdk = subprocess.Popen(sdk_command("v3", image, root, "--source", str(source(tmp_path, "long_running.py")),
                                       "--entry-script", "long_running.py",
                                       *hp(sagemaker_training_compiler_enabled=False, on_sigterm="save")),
                           env=sdk_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: (root / "model" / "pid-rank0").exists(), 300, "the v3 job's worker to start", sdk)
        name = docker("ps", "--filter", "name=algo-1", "--format", "{{.Names}}").stdout.split()[0]
        sent = time.monotonic()
        stopped = docker("stop", "--time", "60", name, timeout=120)
        waited = time.monotonic() - sent
        assert stopped.returncode == 0, stopped.stdout
        code = int(docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip())
        sdk.send_signal(signal.SIGINT)
        sdk.wait(timeout=120)
    finally:
        if sdk.poll() is None:
            sdk.kill()
    assert code == 143 and waited < 30, (code, waited)
    assert (root / "model" / "sigterm-rank0").exists()                 # the script's own SIGTERM handler ran

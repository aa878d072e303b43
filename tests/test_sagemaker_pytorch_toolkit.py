"""The SageMaker PyTorch training toolkit's own local-mode tests (aws/sagemaker-pytorch-training-toolkit,
test/integration/local/), those a CPU can run, through the real `train`: its test resources byte for byte
(tests/third_party/sagemaker-pytorch-training-toolkit, PROVENANCE), each job folder as the SageMaker Python SDK v2
writes it for the estimator the test builds (`PyTorch(entry_point=..., instance_count=..., hyperparameters=...)`),
and what the test asserts (output/success, the files in model/, or a failure).

What differs from theirs, and why: the MNIST data is made here in the format the script reads (torchvision's
processed files, as their test/resources/mnist/data held them), a few hundred images instead of 60,000, so that each
job takes seconds; their two "instances" are two `train` processes on this machine (as tests/test_distributed.py
runs hosts), named 127.0.0.1 and localhost so that both resolve; and where a test says so, the job is ours as well
as theirs (the compiler on, as a user migrating from Training Compiler would turn it on; two workers where the
script never forms a process group).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from overlay import overlay_python

from conftest import BIN, REPO, free_port, new_job, run_train, start_train, stop

pytestmark = [pytest.mark.slow]

PEER = REPO / "tests" / "third_party" / "sagemaker-pytorch-training-toolkit" / "test" / "resources"
MNIST = PEER / "mnist" / "mnist.py"
DIST_OPERATIONS = PEER / "distributed_operations.py"
REQUIREMENTS = PEER / "requirements"
HOSTS = ["127.0.0.1", "localhost"]
TRAIN_IMAGES, TEST_IMAGES = 256, 100


def write_mnist(root: Path, seed: int = 0) -> None:
    """MNIST as torchvision's MNIST(root) reads it from a processed folder (root/MNIST/processed/training.pt and
    test.pt: a uint8 tensor of 28x28 images and an int64 tensor of labels), as the peer's data folder held it. Each
    digit is a bright square in a place of its own, with noise: something a few steps can learn."""
    generator = torch.Generator().manual_seed(seed)
    folder = root / "MNIST" / "processed"
    folder.mkdir(parents=True)
    for name, count in (("training.pt", TRAIN_IMAGES), ("test.pt", TEST_IMAGES)):
        labels = torch.randint(0, 10, (count,), generator=generator)
        images = torch.randint(0, 64, (count, 28, 28), generator=generator, dtype=torch.uint8)
        for i, label in enumerate(labels.tolist()):
            row, column = 2 + (label // 5) * 12, 2 + (label % 5) * 5
            images[i, row:row + 10, column:column + 4] = 255
        torch.save((images, labels), folder / name)


def peer_job(root: Path, script: Path, hyperparameters: dict, hosts: list[str] | None = None, current: str = "",
             training_data: bool = True):
    """A job folder as SDK v2 writes it for PyTorch(entry_point=script, hyperparameters=...): the script's folder as
    the code, the training channel (the peer's tests fit {'training': data_dir/training}), and the hyperparameters
    JSON-encoded beside the SDK's own."""
    job = new_job(root)
    shutil.rmtree(job.root / "code")
    shutil.copytree(script.parent if script.is_file() else script, job.root / "code")
    shutil.rmtree(job.root / "input" / "data" / "train")
    channels = {}
    if training_data:
        write_mnist(job.root / "input" / "data" / "training")
        channels = {"training": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                                 "RecordWrapperType": "None"}}
    (job.config / "inputdataconfig.json").write_text(json.dumps(channels))
    program = script.name if script.is_file() else "entry.py"
    sent = {"sagemaker_program": program, "sagemaker_submit_directory": str(job.root / "code"),
            "sagemaker_container_log_level": 20, "sagemaker_job_name": root.name, "sagemaker_region": "us-west-2",
            **hyperparameters}
    (job.config / "hyperparameters.json").write_text(json.dumps({k: json.dumps(v) for k, v in sent.items()}))
    if hosts:
        job.set_hosts(hosts, current=current)
    return job


def run_hosts(tmp_path: Path, script: Path, hyperparameters: dict, timeout: float = 300, **env: str):
    """The job on two hosts, two `train` processes here; returns the jobs and their logs."""
    jobs = [peer_job(tmp_path / f"host-{host}", script, hyperparameters, HOSTS, host) for host in HOSTS]
    port = str(free_port())
    procs = [start_train(job, tmp_path / f"{i}.log", MASTER_PORT=port, OPENTC_PEER_TIMEOUT="60", **env)
             for i, job in enumerate(jobs)]
    try:
        for proc in procs:
            proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("hosts did not finish: " + (tmp_path / "0.log").read_text()[-3000:]) from None
    finally:
        for proc in procs:
            stop(proc)
    logs = [(tmp_path / f"{i}.log").read_text() for i in range(len(HOSTS))]
    return jobs, [proc.returncode for proc in procs], logs


def summary(job) -> dict:
    return job.read_json("output/data/job-summary.json")


# -- test_single_machine_training.py: test_mnist ----------------------------------------------------------------------
@pytest.mark.xla
def test_mnist_on_one_host_with_the_compiler_on(tmp_path):
    """Theirs: PyTorch(entry_point=mnist.py, instance_count=1, hyperparameters={'processor': 'cpu'}) succeeds and
    leaves model.pth. Ours too: with Training Compiler on (XLA), as a user migrating would turn it on, the script never
    uses the XLA device, and the compile report says so as Inductor's does (nothing_compiled); the script prints no
    training loss at its log interval, only 'Test set: Average loss', which is no point of the loss curve."""
    job = peer_job(tmp_path / "mnist", MNIST, {"processor": "cpu", "sagemaker_training_compiler_enabled": True})
    result = run_train(job)
    assert result.returncode == 0 and job.succeeded, result.output[-5000:]
    assert (job.model / "model.pth").is_file()
    # One test per epoch, printed twice: by the script's own handler and by the root logger's.
    printed = result.output.count("Test set: Average loss")
    assert printed >= 1
    found = summary(job)
    assert found["loss"]["points"] == [], found["loss"]
    assert found["loss"]["evaluation_lines"] == printed, found["loss"]
    lines = f"{printed} evaluation line{'s' if printed > 1 else ''}"
    assert f"no training loss in the log ({lines} left out)" in result.output
    report = job.compile_report()
    assert report["executions"] == 0 and report["graphs_compiled"] == 0, report
    assert [f["kind"] for f in report["findings"]] == ["nothing_compiled"], report["findings"]
    from opentc_launcher.compile_report import NOTHING_COMPILED_PROBLEM
    assert report["findings"][0]["problem"].startswith(NOTHING_COMPILED_PROBLEM.format(backend="xla")), report
    assert "torch_xla.device()" in report["findings"][0]["fix"]
    assert any(f.startswith("compile report of rank0: nothing was compiled in this process") for f in found["findings"])


# -- test_distributed_training.py: test_mnist_cpu ---------------------------------------------------------------------
def test_mnist_on_two_hosts_meets_through_the_containers_master(tmp_path):
    """Theirs: instance_count=2, hyperparameters={'backend': 'gloo'}: the script calls
    init_process_group(backend, rank=hosts.index(current_host), world_size=len(hosts)) and leaves the address to the
    container (MASTER_ADDR, MASTER_PORT, as AWS's PyTorch images export for every job). Both hosts succeed with
    model.pth; their workers met, so no finding says otherwise."""
    jobs, codes, logs = run_hosts(tmp_path, MNIST, {"backend": "gloo"})
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    for job, log in zip(jobs, logs, strict=True):
        assert job.succeeded and (job.model / "model.pth").is_file(), log[-3000:]
        assert "Initialized the distributed environment: 'gloo' backend on 2 nodes" in log, log[-3000:]
        assert "trains on its own" not in log
        assert "init_process_group(backend, rank=hosts.index(current_host), world_size=len(hosts))" in log
        assert not any("no process group" in f for f in summary(job)["findings"]), summary(job)["findings"]
        assert summary(job)["processes"][0]["process_group"] == {"backend": "gloo", "world_size": 2}


# -- test_distributed_training.py: test_dist_operations_path_cpu ------------------------------------------------------
def test_distributed_operations_on_two_hosts(tmp_path):
    """Theirs: distributed_operations.py, instance_count=2, hyperparameters={'backend': 'gloo'}: SM_NUM_CPUS processes
    per host (its own, started with torch.multiprocessing, meeting on hosts[0]:55555, a port the script fixes) run
    broadcast, all_reduce, a barrier and send/recv; each host writes model/success. The job sets its world itself:
    it ran before issue 52 too, and is here as the peer's test."""
    jobs, codes, logs = run_hosts(tmp_path, DIST_OPERATIONS, {"backend": "gloo"})
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    for job, log in zip(jobs, logs, strict=True):
        assert job.succeeded and (job.model / "success").read_text() == "success", log[-3000:]
        assert "Run operations supported by 'gloo' backend." in log


# -- test_distributed_training.py: test_cpu_nccl ----------------------------------------------------------------------
def test_nccl_on_cpu_hosts_fails_naming_nccl_and_the_missing_gpu(tmp_path):
    """Theirs: mnist.py with {'backend': 'nccl'} on two CPU instances must fail, with output/failure. Ours names why:
    NCCL needs GPUs, and what to use on a CPU."""
    jobs, codes, logs = run_hosts(tmp_path, MNIST, {"backend": "nccl"})
    assert codes == [1, 1], logs[0][-3000:] + logs[1][-3000:]
    for job in jobs:
        failure = job.failure
        assert failure is not None and failure.startswith("Training failed: the training script ended with exit "
                                                          "code 1"), failure
        assert 'the script asks torch.distributed for backend="nccl", which needs GPUs, and this host has ' \
               'none' in failure, failure
        assert 'backend="gloo"' in failure and "ProcessGroupNCCL is only supported with GPUs" in failure, failure


# -- test_requirements.py: test_requirements_file ---------------------------------------------------------------------
def test_requirements_file_is_installed_before_the_entry_point(tmp_path):
    """Theirs: source_dir=requirements/ with entry.py, which imports pyfiglet, named by requirements.txt (from PyPI,
    as their test installs it). In an overlay Python (tests/overlay.py), so that the test venv stays as it is."""
    train = overlay_python(tmp_path / "python")
    job = peer_job(tmp_path / "requirements", REQUIREMENTS, {}, training_data=False)
    result = run_train(job, command=train, PATH=f"{train.parent}:{BIN}:/usr/bin:/bin")
    assert result.returncode == 0 and job.succeeded, result.output[-5000:]
    assert "Successfully installed pyfiglet" in result.output
    assert "|_|" in result.output   # the figlet letters of 'hello, world!'


# -- ours: two workers that never meet --------------------------------------------------------------------------------
def test_two_workers_without_a_process_group_are_a_finding(tmp_path):
    """mnist.py without a backend under torch_distributed with two workers (as Lightning's defaults on a CPU train):
    each worker trains its own copy, never synchronised. The job succeeds, and its summary says so as a finding."""
    job = peer_job(tmp_path / "apart", MNIST, {"sagemaker_torch_distributed_enabled": True})
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0 and job.succeeded, result.output[-5000:]
    found = summary(job)
    said = [f for f in found["findings"] if f.startswith("2 workers, no process group: each trained its own copy")]
    assert len(said) == 1, found["findings"]
    assert said[0] in result.output
    assert [p["process_group"] for p in found["processes"]] == [None, None]

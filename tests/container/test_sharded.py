"""Issue 25 across hosts: a plain script that shards its model with FSDP2 (fully_shard) and compiles it with
torch.compile, on two containers (algo-1 and algo-2, one worker each, asked for as the SDK v2's
distribution={"torch_distributed": ...} asks), in the inductor image. The job is stopped as StopTrainingJob or a
spot interruption stops it (SIGTERM to both containers) after step 3, and started again on fresh containers with
the checkpoints SageMaker restores: every host syncs /opt/ml/checkpoints to the one checkpoint_s3_uri, and a
restart downloads all of it to every host, so each new host gets both hosts' shards (the test copies the step
folders of both, as that sync would). The resumed job ends with one uninterrupted eager process's loss curve.
The hosts' summaries make one job in opentc-compare."""

import json
import shutil
import subprocess
import sys
import time

import pytest

from .conftest import docker, logs, run_job, start_job, wait_container

pytestmark = pytest.mark.container

HOSTS = ["algo-1", "algo-2"]
SHARDED = {"sagemaker_torch_distributed_enabled": True, "sagemaker_training_compiler_backend": "inductor",
           "checkpoints": "/opt/ml/checkpoints"}


def start_hosts(image, make_job, containers, network, run, **hyperparameters):
    jobs, names = [], []
    for host in HOSTS:
        job = make_job(f"{run}-{host}", script="fsdp2_compile.py", **SHARDED, **hyperparameters)
        job.set_hosts(HOSTS, current=host)
        jobs.append(job)
        names.append(containers(prefix=f"opentc-test-{run}-{host}"))
    return jobs, names


def launch(image, jobs, names, network):
    for host, job, name in zip(HOSTS, jobs, names, strict=True):
        start_job(image, job, name, "--hostname", host, "--network-alias", host, "-e", "OPENTC_PEER_TIMEOUT=120",
                  "-e", "OPENTC_TERMINATION_GRACE=30", network=network)


def test_a_sharded_compiled_job_over_two_hosts_stops_and_resumes_with_the_uninterrupted_curve(
        inductor_image, make_job, containers):
    single = make_job("single", script="fsdp2_compile.py")
    reference = run_job(inductor_image, containers(), single, command=(
        "python", "/opt/ml/code/fsdp2_compile.py", "--compile", "no", "--out", "/opt/ml/model"))
    assert reference.returncode == 0, reference.output[-3000:]
    expected = single.read_json("model/losses.json")["losses"]

    network = containers("network", "opentc-test-net")
    assert docker("network", "create", network).returncode == 0
    first, first_names = start_hosts(inductor_image, make_job, containers, network, "first", pause_after_step=3)
    launch(inductor_image, first, first_names, network)
    saved = first[0].checkpoints / "step-000003" / "progress.json"   # rank 0 writes it after every rank's shard
    deadline = time.monotonic() + 400
    while not saved.exists():
        assert time.monotonic() < deadline, "\n".join(logs(n)[-3000:] for n in first_names)
        time.sleep(1)
    for name in first_names:   # StopTrainingJob: SIGTERM to every host at once
        assert docker("kill", "--signal", "TERM", name).returncode == 0
    codes = [wait_container(name, 120) for name in first_names]
    assert codes == [143, 143], "\n".join(logs(n)[-3000:] for n in first_names)
    assert all(job.failure.startswith("Training stopped: SIGTERM received") for job in first)
    assert (first[1].checkpoints / "step-000003" / "__1_0.distcp").exists()   # each host wrote its own shard

    second, second_names = start_hosts(inductor_image, make_job, containers, network, "second")
    for job in second:   # what a restart downloads from checkpoint_s3_uri: every host's files
        for source in first:
            for step in source.checkpoints.glob("step-*"):
                shutil.copytree(step, job.checkpoints / step.name, dirs_exist_ok=True)
    launch(inductor_image, second, second_names, network)
    codes = [wait_container(name, 500) for name in second_names]
    assert codes == [0, 0], "\n".join(logs(n)[-3000:] for n in second_names)
    leader_log = logs(second_names[0])
    assert "resumed from /opt/ml/checkpoints/step-000003 after step 3" in leader_log
    assert "step 3 loss" not in leader_log and "step 4 loss" in leader_log
    trained = second[0].read_json("model/losses.json")
    assert trained["world"] == 2 and trained["sharded"] is True, trained
    assert trained["losses"] == pytest.approx(expected, rel=1e-3), (trained["losses"], expected)
    assert second[0].compile_report(0)["graphs_compiled"] > 0

    # One job, not two: each host's summary says it is one of two, and opentc-compare shows them as one.
    assert "this host's summary (algo-2 of 2: algo-1, algo-2)" in logs(second_names[1])
    compared = subprocess.run([sys.executable, "-m", "opentc_compare.cli", *(str(job.root) for job in second)],
                              capture_output=True, text=True, timeout=120)
    assert compared.returncode == 0, compared.stderr
    assert "all 2 hosts" in compared.stdout, compared.stdout
    assert json.loads((second[1].output / "data" / "job-summary.json").read_text())["current_host"] == "algo-2"

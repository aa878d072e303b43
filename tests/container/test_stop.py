"""`docker stop` during training, as StopTrainingJob does it: docker's SIGTERM goes to tini, tini forwards it to
`train`, `train` to every worker; they end within the grace period, and what they wrote before stays."""

import time

import pytest

from conftest import wait_for

from .conftest import docker, inspect, logs, start_job

pytestmark = pytest.mark.container


def long_job(make_job, **hyperparameters):
    job = make_job(script="long_running.py", sagemaker_training_compiler_enabled=False, **hyperparameters)
    return job


def wait_for_workers(job, name, workers):
    def started():
        return all((job.model / f"pid-rank{rank}").exists() and (job.model / f"pid-rank{rank}").read_text()
                   for rank in range(workers))
    try:
        wait_for(started, 180, "the workers to start")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{logs(name)[-4000:]}") from None


def assert_written_before_signal_intact(job, workers):
    for rank in range(workers):
        assert (job.checkpoints / f"step-100-rank{rank}.ckpt").read_text() == "weights at step 100"
        assert (job.model / f"partial-rank{rank}.bin").read_text() == "model so far"


def test_docker_stop_reaches_every_worker_within_the_grace_period(each_image, make_job, containers):
    job = long_job(make_job, sagemaker_pytorch_xla_multi_worker_enabled=True, on_sigterm="save")
    name = containers()
    start_job(each_image, job, name, "-e", "OPENTC_WORKERS_PER_HOST=2", "-e", "OPENTC_TERMINATION_GRACE=30")
    wait_for_workers(job, name, 2)
    stop_seconds = docker_stop(name)
    state = inspect(name)["State"]
    assert state["ExitCode"] == 143 and not state["OOMKilled"], logs(name)[-4000:]
    assert stop_seconds < 20, "the workers ended on SIGTERM, long before docker's SIGKILL (60 s)"
    for rank in range(2):
        assert (job.model / f"sigterm-rank{rank}").exists(), logs(name)[-4000:]
        assert (job.checkpoints / f"final-rank{rank}.ckpt").read_text() == "saved on SIGTERM"
    assert job.failure.startswith("Training stopped: SIGTERM received")
    assert "the workers ended within the grace period" in job.failure
    assert_written_before_signal_intact(job, 2)


def test_a_worker_ignoring_sigterm_is_killed_after_the_grace_period(each_image, make_job, containers):
    job = long_job(make_job, on_sigterm="ignore")
    name = containers()
    start_job(each_image, job, name, "-e", "OPENTC_TERMINATION_GRACE=3")
    wait_for_workers(job, name, 1)
    stop_seconds = docker_stop(name)
    assert inspect(name)["State"]["ExitCode"] == 143, logs(name)[-4000:]
    assert 2.5 < stop_seconds < 20, stop_seconds   # the toolkit's 3 s grace, not docker's 60 s
    assert "sending SIGKILL" in logs(name)
    assert "the workers were killed with SIGKILL" in job.failure
    assert_written_before_signal_intact(job, 1)


def docker_stop(name):
    """docker stop with a 60 s timeout (SageMaker allows about 120 s); returns how long it took."""
    sent = time.monotonic()
    stopped = docker("stop", "--time", "60", name, timeout=120)
    assert stopped.returncode == 0, stopped.stdout
    return time.monotonic() - sent

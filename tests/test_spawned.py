"""Scripts that start their own XLA processes (torch_xla.launch, as torch-xla's examples do): the compile
report, the persistent cache and the compilation limit follow the training into those processes, through
the real `train` entry on XLA:CPU. Also: the supervisor reports a real orphan, not Python's helpers."""

import os
import time

import pytest

from conftest import logged_failure, run_train

pytestmark = [pytest.mark.slow, pytest.mark.xla]

REPORTS = "output/data/compiler"


def launch_job(make_job, **hyperparameters):
    job = make_job(script="xla_launch_train.py", steps=10, **hyperparameters)
    return job


def test_launch_gets_one_report_per_process_and_the_cache_in_the_child(make_job):
    job = launch_job(make_job)
    result = run_train(job)
    assert result.returncode == 0, result.output[-6000:]
    trained = job.read_json("output/data/launch-0.json")
    parent = job.read_json(f"{REPORTS}/compile-report-rank0.json")
    child = job.read_json(f"{REPORTS}/compile-report-rank0-spawned0.json")
    assert parent["executions"] == 0 and parent["graphs_compiled"] == 0 and parent["optimizer_steps"] == 0
    assert "rank0: compile report: no XLA execution observed in this process" in result.output
    assert "clean" not in result.output.split("rank0: compile report:", 1)[1].splitlines()[0]
    assert child["process"] == "rank0-spawned0" and child["optimizer_steps"] == 10, child
    assert child["graphs_compiled"] >= 1 and child["executions"] >= 10, child
    assert child["persistent_cache"]["dir"].endswith("rank0-spawned0"), child
    assert trained["pid"] != os.getpid()
    assert "left behind" not in result.output       # multiprocessing's helper process is not an orphan

    again = run_train(job)                           # the same job: the child's graphs come from the cache
    assert again.returncode == 0, again.output[-6000:]
    child = job.read_json(f"{REPORTS}/compile-report-rank0-spawned0.json")
    assert child["graphs_compiled"] == 0 and child["persistent_cache"]["hits"] >= 1, child


def test_launch_child_honours_the_compilation_limit(make_job):
    job = launch_job(make_job, changing_shapes=True, sagemaker_training_compiler_max_compilations=3)
    result = run_train(job)
    assert result.returncode == 4, result.output[-6000:]
    assert "compilation limit reached: 4 graphs compiled, more than the 3 allowed" in job.failure
    assert logged_failure(result.output).startswith("Training failed")
    child = job.read_json(f"{REPORTS}/compile-report-rank0-spawned0.json")
    assert child["exit_code"] == 4 and child["graphs_compiled"] == 4, child


def test_a_process_that_ends_by_itself_a_moment_after_the_script_is_not_left_behind(make_job):
    """Issue 40 (design review): a clean torch_xla.launch job under load logged processes "left behind": the check
    ran while a child was still ending. Every process now gets a moment (supervisor.EXIT_WAIT) to end by itself."""
    job = make_job(script="child_ends_after_the_script.py", sagemaker_training_compiler_enabled=False)
    result = run_train(job)
    assert result.returncode == 0, result.output[-6000:]
    assert "left behind" not in result.output, result.output[-3000:]


def test_a_real_orphan_is_reported_and_stopped(make_job):
    job = make_job(script="leaves_orphan.py")
    result = run_train(job)
    assert result.returncode == 0, result.output[-6000:]
    pid = int((job.output / "data" / "orphan.pid").read_text())
    assert "stopping 1 process(es) the training left behind" in result.output
    assert f"{pid} (sleep 600)" in result.output
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}")

"""What users see when something goes wrong: output/failure, the log, and train's exit code."""

import os
import uuid

import pytest

from conftest import run_train

FAILURE_REASON = 1024  # what DescribeTrainingJob shows of output/failure


def failing_job(make_job, script, **hyperparameters):
    return make_job(script=script, **hyperparameters)


# The sample's compiler is on (XLA), as most users' jobs are: a crash and a SIGKILL are seen through it. Where the
# promise is train's own (an exit code passed on, a file kept, argv kept whole), the compiler is off: the same path
# through train, without torch_xla's import in the worker (about 5 s of CPU a job here).
OFF = {"sagemaker_training_compiler_enabled": False}


@pytest.mark.slow
def test_crashing_script(make_job):
    job = failing_job(make_job, "crash.py")
    result = run_train(job)
    assert result.returncode == 1
    reason = job.failure[:FAILURE_REASON]
    assert reason.startswith("Training failed: the training script ended with exit code 1 on host algo-1.")
    assert "ValueError: batch 7 has 3 columns, expected 4" in reason.splitlines()[1]
    assert 'in load_batch' in job.failure and "crash.py" in job.failure
    assert "Reporting training FAILURE" in result.output
    assert not job.succeeded


def test_missing_script(make_job):
    job = make_job()
    job.set_hyperparameters(sagemaker_program="nope.py")
    result = run_train(job)
    assert result.returncode == 2
    assert job.failure.startswith("Training not started: training script 'nope.py' not found in ")
    assert "train.py" in job.failure  # says what is there


@pytest.mark.slow
def test_script_killed_by_sigkill_reports_137(make_job):
    job = failing_job(make_job, "killed.py")
    result = run_train(job)
    assert result.returncode == 137
    assert "exit code 137, i.e. killed by SIGKILL" in job.failure
    assert "ran out of memory" in job.failure


@pytest.mark.parametrize("code", [3, 137])
def test_exit_code_of_the_script_is_trains(make_job, code):
    job = failing_job(make_job, "exit_with.py", code=code, **OFF)
    result = run_train(job)
    assert result.returncode == code
    assert f"exit code {code}" in job.failure
    assert f"giving up with exit code {code}" in job.failure  # the tail of its stderr


def test_bad_compiler_hyperparameter_starts_nothing(make_job):
    """One real job; each value a flag refuses is a case of the rule's unit test (test_compiler_settings.py)."""
    job = failing_job(make_job, "argv_echo.py")
    job.write_hyperparameters({**job.hyperparameters(), "sagemaker_training_compiler_enabled": "yes"})
    result = run_train(job)
    assert result.returncode == 2
    assert job.failure.startswith('Training not started: hyperparameter sagemaker_training_compiler_enabled has the '
                                  'value "yes", which is not accepted: use "true" or "false"')
    assert "Reporting training FAILURE" in result.output
    assert not (job.model / "argv.json").exists()


def test_user_failure_file_is_not_overwritten(make_job):
    job = failing_job(make_job, "crash.py", **OFF)
    job.output.mkdir(parents=True, exist_ok=True)
    # A file a user left in output/data survives; a stale verdict of an earlier run does not.
    (job.output / "data").mkdir(exist_ok=True)
    (job.output / "data" / "notes.txt").write_text("mine")
    (job.output / "success").write_text("")
    run_train(job)
    assert (job.output / "data" / "notes.txt").read_text() == "mine"
    assert not job.succeeded and job.failure


def test_shell_metacharacters_arrive_as_one_argument_and_run_nothing(make_job, tmp_path):
    marker = tmp_path / f"pwned-{uuid.uuid4().hex}"
    hostile = f"a b; touch {marker}"
    others = f"$(touch {marker}) `touch {marker}` | touch {marker} && touch {marker}"
    job = failing_job(make_job, "argv_echo.py", note=hostile, other=others, n=2, **OFF)
    result = run_train(job)
    assert result.returncode == 0, result.output[-3000:]
    argv = job.read_json("model/argv.json")
    assert argv == ["-n", "2", "--note", hostile, "--other", others]
    assert not marker.exists()
    assert not os.path.exists(str(marker))

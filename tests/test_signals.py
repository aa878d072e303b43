"""Stopping a job: SIGTERM to `train` reaches every worker, which get a grace period before SIGKILL;
one worker dying stops the others; nothing is left running and nothing the script wrote is lost."""

import json
import signal
import time

import pytest

from conftest import pid_alive, run_train, start_train, stop, wait_for


def long_job(make_job, workers=1, **hyperparameters):
    return make_job(script="long_running.py", sagemaker_training_compiler_enabled=False,
                    sagemaker_pytorch_xla_multi_worker_enabled=workers > 1, **hyperparameters)


def worker_pids(job, workers):
    pids = []
    for rank in range(workers):
        path = job.model / f"pid-rank{rank}"
        if not path.exists() or not path.read_text():
            return None
        pids.append(int(path.read_text()))
    return pids


def started(job, workers, proc, log):
    return wait_for(lambda: worker_pids(job, workers), 120, "workers to start", proc, log)


def assert_written_before_signal_intact(job, workers):
    for rank in range(workers):
        assert (job.checkpoints / f"step-100-rank{rank}.ckpt").read_text() == "weights at step 100"
        assert (job.model / f"partial-rank{rank}.bin").read_text() == "model so far"


def sigterm_once_started(job, tmp_path, workers=1, signum=signal.SIGTERM, **env):
    """Start `train`, wait for its workers, send it SIGTERM (or `signum`); returns (worker pids, exit code,
    seconds, log)."""
    log = tmp_path / "train.log"
    proc = start_train(job, log, **env)
    try:
        pids = started(job, workers, proc, log)
        sent = time.monotonic()
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
        return pids, code, time.monotonic() - sent, log.read_text()
    finally:
        stop(proc)


def test_sigterm_stops_a_single_worker_cleanly(make_job, tmp_path):
    job = long_job(make_job)
    pids, code, waited, _ = sigterm_once_started(job, tmp_path, OPENTC_TERMINATION_GRACE="30")
    assert code == 143
    assert waited < 10, "a worker that ends on SIGTERM must not wait for the grace period"
    assert (job.model / "finally-rank0").exists()        # the script's finally block ran
    assert not pid_alive(pids[0])
    assert job.failure.startswith("Training stopped: SIGTERM received")
    assert "the workers ended within the grace period" in job.failure
    assert_written_before_signal_intact(job, 1)
    summary = job.read_json("output/data/job-summary.json")          # a stopped job has its summary too
    assert summary["outcome"]["stopped"] is True and summary["outcome"]["exit_code"] == 143
    assert summary["processes"][0]["exit_code"] == 143                 # the worker's own record, written on SIGTERM


def test_sighup_from_a_closed_terminal_is_a_stop_and_the_scripts_finally_runs(make_job, tmp_path):
    job = long_job(make_job)
    pids, code, waited, log = sigterm_once_started(job, tmp_path, signum=signal.SIGHUP, OPENTC_TERMINATION_GRACE="30")
    assert code == 128 + signal.SIGHUP, log[-3000:]
    assert waited < 10
    assert (job.model / "finally-rank0").exists()        # the worker got SIGTERM, not SIGKILL
    assert not pid_alive(pids[0])
    assert job.failure.startswith("Training stopped: SIGHUP received (the terminal or ssh session that ran train "
                                  "closed)"), job.failure
    assert "received SIGHUP: stopping the workers" in log
    assert_written_before_signal_intact(job, 1)


@pytest.mark.slow
def test_sigterm_reaches_every_worker_of_several(make_job, tmp_path):
    job = long_job(make_job, workers=2, on_sigterm="save")
    pids, code, waited, log = sigterm_once_started(job, tmp_path, workers=2, OPENTC_WORKERS_PER_HOST="2",
                                                   OPENTC_TERMINATION_GRACE="30")
    assert code == 143 and waited < 40, log[-3000:]
    for rank in range(2):
        assert (job.model / f"sigterm-rank{rank}").exists(), log[-3000:]
        assert (job.checkpoints / f"final-rank{rank}.ckpt").read_text() == "saved on SIGTERM"
    assert not any(pid_alive(p) for p in pids)
    assert job.failure.startswith("Training stopped: SIGTERM received")
    assert_written_before_signal_intact(job, 2)


@pytest.mark.slow
def test_worker_ignoring_sigterm_is_killed_after_the_grace_period(make_job, tmp_path):
    job = long_job(make_job, on_sigterm="ignore")
    pids, code, waited, log = sigterm_once_started(job, tmp_path, OPENTC_TERMINATION_GRACE="3")
    assert code == 143
    assert 2.5 < waited < 15, waited
    assert not pid_alive(pids[0])
    assert "the workers were killed with SIGKILL" in job.failure
    assert "sending SIGKILL" in log
    assert_written_before_signal_intact(job, 1)


@pytest.mark.slow
def test_one_worker_of_two_crashing_stops_the_other(make_job, tmp_path):
    job = long_job(make_job, workers=2, crash_rank=1)
    log = tmp_path / "train.log"
    proc = start_train(job, log, OPENTC_WORKERS_PER_HOST="2")
    try:
        pids = started(job, 2, proc, log)
        code = proc.wait(timeout=60)
    finally:
        stop(proc)
    assert code == 1, log.read_text()[-3000:]
    assert not any(pid_alive(p) for p in pids)           # rank 0 (sleeping 600 s) was stopped
    reason = job.failure[:1024]
    assert reason.startswith("Training failed: the training script ended with exit code 1 on rank 1 of 2, "
                             "host algo-1.")
    assert "RuntimeError: rank 1 hit a NaN loss" in reason
    assert (job.model / "finally-rank0").exists()        # rank 0 was stopped with SIGTERM, not SIGKILL


def test_a_stop_that_lands_in_a_weakref_callback_still_stops_the_script(make_job, tmp_path):
    """Python drops an exception raised inside a weakref callback ("Exception ignored in ..."); a stop that lands
    there (inside Dynamo's guard dictionaries, say) must still end the script, through its `finally`."""
    job = make_job(script="stop_in_callback.py", sagemaker_training_compiler_enabled=False)
    log = tmp_path / "train.log"
    proc = start_train(job, log, OPENTC_TERMINATION_GRACE="60")
    try:
        wait_for(lambda: (job.model / "ready").exists(), 120, "the callback", proc, log)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=90)
        seconds = time.monotonic() - sent
    finally:
        stop(proc)
    output = log.read_text()
    ended = json.loads((job.model / "ended.json").read_text())
    assert ended == {"exception": "Terminated", "trained_to_the_end": False}, output[-3000:]
    assert code == 143 and seconds < 30, output[-3000:]          # stopped by the stop, not killed after the grace
    assert "SIGTERM landed where Python cannot raise it" in output and "Exception ignored" not in output
    assert job.failure.startswith("Training stopped: SIGTERM received")


def test_a_pool_the_script_forks_can_terminate_its_workers(make_job):
    """datasets.map(num_proc=N), as run_clm.py's --preprocessing_num_workers asks, forks a pool and ends it with
    terminate(): SIGTERM to each pool worker. A forked child must not inherit the worker's stop-as-exception: a pool
    worker that raised Terminated could die holding the pool's queue lock, and the next terminate() waited forever
    (seen with AWS's wikitext notebook on this image). Nor may a SIGTERM that reaches a pool worker before it has run
    a line be lost: on a busy machine terminate() can come before a worker was ever scheduled (seen: 1 run in about
    70 under load, Pool.terminate() waiting forever on a worker that never got its SIGTERM)."""
    job = make_job(script="fork_pool.py", sagemaker_training_compiler_enabled=False, rounds=100)
    result = run_train(job, timeout=240)
    assert result.returncode == 0, result.output[-3000:]
    assert (job.model / "pools.txt").read_text() == "100"
    assert "Terminated: stopped by SIGTERM" not in result.output

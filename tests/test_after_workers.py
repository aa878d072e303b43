"""After the workers end, nothing may cost a job its verdict: what the script printed (a loss that is not a
number, a line that is a trap for a regular expression), the work the job still does (debug mode's reports), a stop
that arrives then, a summary that cannot be written, and the cleaning up of the run's own files.

Each case runs the real `train` on a real job folder; the only stand-in is a tlparse that takes ten minutes
(OPENTC_TLPARSE), as the real one does over a large trace.
"""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, SCRIPTS, clean_env, logged_failure, run_train, start_train, stop, wait_for
from opentc_launcher import exit_codes

pytestmark = [pytest.mark.slow, pytest.mark.inductor]


def says(make_job, *lines, **arguments):
    return make_job(script="says.py", sagemaker_training_compiler_enabled=False, lines=json.dumps(list(lines)),
                    **arguments)


def strict(path: Path):
    def refuse(constant):
        raise AssertionError(f"{path} is not strict JSON: it holds {constant}")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_a_loss_that_is_not_a_number_at_either_end_still_gets_its_verdict(make_job):
    job = says(make_job, "step 1 loss inf", "step 2 loss 1.5", "step 3 loss nan")
    result = run_train(job)
    assert result.returncode == 0, result.output[-3000:]
    assert job.succeeded and job.failure is None
    summary = strict(job.output / "data" / "job-summary.json")
    assert summary["loss"]["points"] == [{"step": 1, "loss": None}, {"step": 2, "loss": 1.5},
                                         {"step": 3, "loss": None}]
    assert "loss not a number -> not a number" in result.output


def test_the_script_exit_code_stands_when_the_loss_diverged(make_job):
    job = says(make_job, "step 1 loss 2.5", "step 2 loss nan", exit_code=3)
    result = run_train(job)
    assert result.returncode == 3 and job.failure.startswith("Training failed: the training script ended with exit "
                                                            "code 3"), result.output[-3000:]


def test_every_number_the_trainer_prints_is_written_as_strict_json(make_job):
    job = says(make_job, "{'loss': '5.9', 'grad_norm': 'nan', 'epoch': '0.5'}",
               "{'train_runtime': '0.0', 'train_samples_per_second': 'inf', 'train_tokens_per_second': 'nan', "
               "'train_loss': 'inf', 'epoch': '1.0'}")
    assert run_train(job).returncode == 0
    summary = strict(job.output / "data" / "job-summary.json")
    assert summary["throughput"]["trainer_samples_per_second"] is None          # a rate of inf says nothing
    assert summary["loss"]["points"] == [{"step": 0, "loss": 5.9}]


def test_a_stop_acts_at_once_while_a_trap_line_is_being_read(make_job, tmp_path):
    # One printed line: the word "loss" and 128 Ki blanks (a regular expression with two adjacent runs of blanks
    # took minutes over it, holding the interpreter, so SIGTERM waited).
    job = says(make_job, blank_loss_line=131072, then="sleep")
    log = tmp_path / "train.log"
    proc = start_train(job, log, OPENTC_TERMINATION_GRACE="20")
    try:
        wait_for(lambda: (job.model / "ready").exists(), 120, "the script", proc, log)
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        assert time.monotonic() - sent < 30, "a stop must act within seconds"
    finally:
        stop(proc)
    assert job.failure.startswith("Training stopped: SIGTERM received")


def debug_inductor_job(make_job):
    return make_job(script="compile/inductor_loop.py", sagemaker_training_compiler_enabled=True,
                    sagemaker_training_compiler_backend="inductor", sagemaker_training_compiler_debug_mode=True,
                    sagemaker_training_compiler_cache=False, steps=2)


def test_a_stop_while_debug_reports_are_made_ends_the_job_as_stopped(make_job, tmp_path):
    job = debug_inductor_job(make_job)
    log = tmp_path / "train.log"
    proc = start_train(job, log, OPENTC_TLPARSE=str(SCRIPTS / "slow_tlparse.py"), OPENTC_TERMINATION_GRACE="20")
    try:
        wait_for(lambda: list((job.compiler_output / "tlparse").glob("*/started")), 300, "tlparse to start", proc, log)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        assert time.monotonic() - sent < 30
    finally:
        stop(proc)
    output = log.read_text()
    assert code == 143, output[-3000:]
    assert (job.output / "data" / "loop_metrics.json").exists()              # the script had finished
    assert job.failure.startswith("Training stopped: SIGTERM received after the training script had ended with exit "
                                  "code 0, while tlparse's report of "), job.failure
    assert not job.succeeded and "Reporting training FAILURE" in output and "Reporting training SUCCESS" not in output
    summary = strict(job.output / "data" / "job-summary.json")
    assert summary["outcome"] == {"exit_code": 143, "succeeded": False, "stopped": True,
                                  "headline": job.failure.splitlines()[0], "kind": "stopped", "rank": None,
                                  "host": None}


def debug_artefacts(folder: Path) -> tuple[list[str], int, int]:
    """What debug mode left in `folder`: its kinds of artefact (by name, without the compile reports only a job asks
    for), torch's traces, and tlparse's reports of them."""
    kinds = sorted(p.name for p in folder.iterdir() if not p.name.startswith("compile-report"))
    reports = len(list((folder / "tlparse").glob("*/index.html")))
    return kinds, len(list((folder / "torch_trace").glob("*.log"))), reports


def test_opentc_run_in_debug_mode_leaves_the_reports_a_job_leaves(tmp_path):
    """Issue 53: debug mode's reports (tlparse's, of each trace) come from one step after the workers, the launcher's
    (after_workers.py), which train and opentc-run both take: opentc-run on its own rendered none. What a train job
    leaves is the same list (tests/test_inductor.py, test_debug_mode_writes_the_trace_the_logs_and_tlparses_report)."""
    debug = tmp_path / "debug"
    debug.mkdir()   # a folder of the user's (train makes the job's)
    ran = subprocess.run([str(a) for a in [BIN / "opentc-run", "--standalone", "--nproc-per-node", "1", "--backend",
                                           "inductor", "--device", "cpu", "--debug-mode", "true", "--debug-dir", debug,
                                           SCRIPTS / "compile" / "inductor_loop.py", "--steps", "2"]],
                         env=clean_env(), cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    kinds, traces, reports = debug_artefacts(debug)
    assert kinds == ["tlparse", "torch_logs.txt", "torch_trace"] and traces == reports == 1, (kinds, traces, reports)
    assert "debug mode: tlparse's report of " in ran.stderr + ran.stdout


def test_the_work_after_the_workers_has_a_bound(make_job, tmp_path):
    job = debug_inductor_job(make_job)
    result = run_train(job, OPENTC_TLPARSE=str(SCRIPTS / "slow_tlparse.py"), OPENTC_FINISH_TIMEOUT="5")
    assert result.returncode == 0 and job.succeeded, result.output[-3000:]
    assert "slow_tlparse.py still running after" in result.output
    assert "could not be made" in result.output


def test_a_summary_that_cannot_be_written_leaves_nothing_half_done_and_the_verdict_stands(make_job):
    job = says(make_job, "step 1 loss 1.0")
    data = job.output / "data"
    (data / "job-summary.json").mkdir(parents=True)       # the rename onto it fails
    result = run_train(job)
    assert result.returncode == 0 and job.succeeded, result.output[-3000:]
    assert "job summary not written" in result.output
    assert sorted(p.name for p in data.iterdir()) == ["job-summary.json"]  # no temporary file ships in output.tar.gz


def test_the_verdict_is_written_before_the_runs_own_files_are_removed(make_job, tmp_path):
    job = says(make_job, scratch_files=30000, exit_code=1)
    log = tmp_path / "train.log"
    proc = start_train(job, log)
    try:
        failure = job.output / "failure"
        wait_for(failure.exists, 300, "the verdict", proc, log)
        scratch = Path((job.model / "scratch.txt").read_text())
        assert scratch.exists(), "the run's files were removed before its verdict was written"
        assert proc.wait(timeout=300) == exit_codes.FAILED
    finally:
        stop(proc)
    assert not scratch.exists()
    assert logged_failure(log.read_text()).rstrip() == job.failure[:1024].rstrip()   # nothing is logged after it

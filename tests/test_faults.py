"""Faults while a job runs: each ends with a non-zero exit code and a failure reason in the first 1,024
characters of output/failure (what DescribeTrainingJob shows), or, when the failure file cannot be written,
the reason on stderr; a stop is honoured at every stage; nothing is left running."""

import json
import os
import signal
import subprocess
import tarfile
import time

import pytest

from conftest import (
    BIN,
    SCRIPTS,
    SilentServer,
    clean_env,
    logged_failure,
    pid_alive,
    run_train,
    start_train,
    stop,
    wait_for,
)
from opentc_launcher import exit_codes

FAILURE_REASON = 1024


def plain_job(make_job, script=None):
    """Compiler off: these faults have nothing to do with XLA, and plain PyTorch starts faster."""
    return make_job(script=script, sagemaker_training_compiler_enabled=False)


def assert_log_ends_with_the_failure(result, job):
    assert "Framework Error" not in result.output and "opentc_toolkit/entry.py" not in result.output
    assert logged_failure(result.output).rstrip() == job.failure[:FAILURE_REASON].rstrip()


def test_a_dataloader_workers_error_leads_the_failure_reason(make_job):
    job = plain_job(make_job, "dataloader_raises.py")
    result = run_train(job)
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]
    reason = job.failure[:FAILURE_REASON]
    lines = reason.splitlines()
    assert lines[0] == "Training failed: the training script ended with exit code 1 on host algo-1."
    assert lines[1] == "ValueError: record 5 has a corrupt label field: 'n/a'"
    assert "DataLoader worker process 0" in lines[2]
    assert_log_ends_with_the_failure(result, job)


def test_a_syntax_error_shows_the_users_file_and_line_only(make_job):
    job = plain_job(make_job)
    (job.root / "code" / "broken.py").write_text("import os\n\ndef main(:\n    pass\n")
    job.set_hyperparameters(sagemaker_program="broken.py")
    result = run_train(job)
    assert result.returncode == exit_codes.FAILED
    reason = job.failure[:FAILURE_REASON]
    assert f'File "{job.root / "code" / "broken.py"}", line 3' in reason
    assert "SyntaxError" in reason
    assert "opentc_launcher" not in job.failure and "runpy" not in job.failure


def test_a_script_with_a_pep_263_coding_line_runs_as_python_runs_it(make_job):
    job = plain_job(make_job)
    source = ("# -*- coding: latin-1 -*-\n"
              "import os\n"
              "word = 'café crème'\n"
              "open(os.path.join(os.environ['SM_MODEL_DIR'], 'word.txt'), 'w', encoding='utf-8').write(word)\n")
    (job.root / "code" / "latin1.py").write_bytes(source.encode("latin-1"))
    job.set_hyperparameters(sagemaker_program="latin1.py")
    result = run_train(job)
    assert result.returncode == 0, result.output[-3000:]
    assert (job.model / "word.txt").read_text(encoding="utf-8") == "café crème"


def test_a_corrupt_tarball_is_called_a_corrupt_tarball(make_job, tmp_path):
    job = plain_job(make_job)
    for item in (job.root / "code").iterdir():
        item.unlink()
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        tar.add(SCRIPTS / "argv_echo.py", arcname="train.py")
    for name, content in [("noise.tar.gz", b"this is not an archive\n" * 40),
                          ("truncated.tar.gz", good.read_bytes()[:60])]:
        (tmp_path / name).write_bytes(content)
        job.set_hyperparameters(sagemaker_submit_directory=f"file://{tmp_path / name}")
        result = run_train(job)
        assert result.returncode == exit_codes.BAD_INPUT, result.output[-3000:]
        reason = job.failure[:FAILURE_REASON]
        assert f"sagemaker_submit_directory 'file://{tmp_path / name}' is" in reason, reason
        assert "corrupt" in reason and "not found" not in reason


def test_output_that_is_a_file_fails_loudly(make_job):
    job = plain_job(make_job, "crash.py")
    job.output.write_text("not a folder")
    result = run_train(job)
    assert result.returncode == exit_codes.BAD_INPUT
    assert "Reporting training FAILURE" in result.output
    assert "could not write" in result.output and "output/failure" in result.output
    assert f"{job.output / 'data'} cannot be created" in result.output
    assert job.output.read_text() == "not a folder"                 # nothing the user wrote is lost


@pytest.fixture
def full_output(make_job):
    """A job whose output/ is a tiny tmpfs that is already full (a full disk). Needs root (mount)."""
    if os.getuid() != 0:
        pytest.skip("mounting a full tmpfs needs root (dev/test runs as root in CI)")
    job = plain_job(make_job, "crash.py")
    (job.output / "data").mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(job.output)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert mounted.returncode == 0, f"mount failed (needed for this test): {mounted.stdout}"
    try:
        (job.output / "data").mkdir()
        try:
            with open(job.output / "data" / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:   # ENOSPC: full
            pass
        yield job
    finally:
        subprocess.run(["umount", str(job.output)], check=False)


def test_a_full_disk_never_leaves_an_empty_failure_file_and_keeps_the_exit_code(full_output):
    job = full_output
    result = run_train(job)
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]   # the script's, not ENOSPC's 28
    assert not (job.output / "failure").exists()
    assert "could not write" in result.output and "No space left on device" in result.output
    assert "ValueError: batch 7 has 3 columns, expected 4" in result.output   # the log still has the reason


def test_a_stop_while_requirements_install_is_honoured(make_job, tmp_path):
    """Issue 51 (9): pip's temporary folders (pip-build-tracker-*, pip-install-*), which a stopped pip leaves behind,
    are in the job's scratch folder and go with it."""
    job = plain_job(make_job, "argv_echo.py")
    index = SilentServer()   # a package index behind a dead proxy
    (job.root / "code" / "requirements.txt").write_text(
        f"--index-url http://127.0.0.1:{index.port}/simple\nopentc-never-published-package==1.0\n")
    log = tmp_path / "train.log"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    proc = start_train(job, log, PIP_FIND_LINKS="", PIP_EXTRA_INDEX_URL="", PIP_CONFIG_FILE=os.devnull,
                       OPENTC_TERMINATION_GRACE="20", TMPDIR=str(temporary))
    try:
        assert index.connected.wait(120), log.read_text()[-3000:]   # pip is waiting for the index
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        waited = time.monotonic() - sent
    finally:
        stop(proc)
        index.close()
    assert code == exit_codes.of_signal(signal.SIGTERM), log.read_text()[-3000:]
    assert waited < 15, waited
    assert job.failure.startswith("Training stopped: SIGTERM received while requirements.txt was being installed")
    assert "pip was given 20 s to finish and pip ended within the grace period" in job.failure
    assert not (job.model / "argv.json").exists()
    assert not list(temporary.iterdir()), list(temporary.iterdir())


def test_pips_own_reason_is_in_the_failure_reason(make_job):
    job = plain_job(make_job, "argv_echo.py")
    (job.root / "code" / "requirements.txt").write_text("opentc-never-published-package==1.0\n")
    result = run_train(job, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_FIND_LINKS="",
                       PIP_EXTRA_INDEX_URL="", PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0", PIP_TIMEOUT="2")
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]
    reason = job.failure[:FAILURE_REASON]
    assert reason.startswith("Training not started: requirements.txt in ")
    assert "ERROR: Could not find a version that satisfies the requirement opentc-never-published-package==1.0" \
        in reason, reason


def test_a_killed_train_takes_its_workers_with_it(make_job, tmp_path):
    job = plain_job(make_job, "long_running.py")
    log = tmp_path / "train.log"
    scratch = tmp_path / "tmp"   # a killed train cannot remove its scratch folder: not in /tmp, then
    scratch.mkdir()
    proc = start_train(job, log, TMPDIR=str(scratch))
    try:
        pid_file = job.model / "pid-rank0"
        wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120, "the worker to start", proc, log)
        worker = int(pid_file.read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        wait_for(lambda: not pid_alive(worker), 15, f"worker {worker} to die with train")
    finally:
        stop(proc)


@pytest.mark.slow
def test_two_single_host_launches_on_one_machine_both_succeed(tmp_path):
    """opentc-run --standalone picks a free port and a fresh rendezvous id, as torchrun's own run() does."""
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        out.mkdir()
        runs.append((out, subprocess.Popen(
            [str(BIN / "opentc-run"), "--standalone", "--nproc-per-node", "2", "--backend", "eager",
             str(SCRIPTS / "report_env.py")], env=clean_env(SM_MODEL_DIR=str(out)), cwd=str(out),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    outputs = [(out, proc.communicate(timeout=300)[0], proc.returncode) for out, proc in runs]
    for _, output, code in outputs:
        assert code == 0, output[-3000:]
    reports = [json.loads((out / "env-rank0.json").read_text()) for out, _, _ in outputs]
    ports = {r["MASTER_PORT"] for r in reports}
    assert len(ports) == 2 and "29500" not in ports, ports
    # on the loopback address, never this host's name (a container without a network cannot resolve it)
    assert {r["MASTER_ADDR"] for r in reports} == {"127.0.0.1"}


def test_a_message_with_a_file_name_that_is_not_utf8_is_written_escaped(make_job):
    job = plain_job(make_job, "undecodable_name.py")
    result = run_train(job)
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]
    reason = job.failure[:FAILURE_REASON]
    assert reason.splitlines()[1] == "ValueError: cannot parse caf\\udce9.csv", reason   # escaped, never lost
    assert "Reporting training FAILURE" in result.output and "Logging error" not in result.output
    assert_log_ends_with_the_failure(result, job)


def test_an_exception_whose_str_raises_is_named_by_its_type(make_job):
    job = plain_job(make_job, "unprintable_exception.py")
    result = run_train(job)
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]
    reason = job.failure[:FAILURE_REASON]
    assert reason.splitlines()[1].startswith("ShardError: <exception str() failed>"), reason
    assert "opentc_launcher" not in job.failure and "in load" in job.failure   # the script's frames, not ours
    assert_log_ends_with_the_failure(result, job)


def test_a_script_that_wrote_failure_but_exited_0_leaves_one_verdict_with_its_words(make_job):
    job = plain_job(make_job, "verdicts.py")
    job.set_hyperparameters(case="failure_then_exit0")
    result = run_train(job)
    assert result.returncode == 0, result.output[-3000:]
    assert not (job.output / "failure").exists()
    assert "my own reason: the validation accuracy stayed at 0.1" in (job.output / "success").read_text()
    assert "wrote" in result.output and "but exited 0" in result.output


def test_a_script_that_wrote_success_then_crashed_leaves_one_verdict(make_job):
    job = plain_job(make_job, "verdicts.py")
    job.set_hyperparameters(case="success_then_crash")
    result = run_train(job)
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]
    assert not (job.output / "success").exists()
    assert job.failure.splitlines()[1] == "RuntimeError: the upload after training failed"
    assert "The training script had written output/success before it failed:\nepoch 3 done" in job.failure


@pytest.mark.parametrize(("index", "cause"), [
    ("http://127.0.0.1:9/simple", "Connection refused"),
    ("https://index.invalid/simple", "Failed to resolve 'index.invalid'"),
], ids=["refused", "no-dns"])
def test_an_unreachable_package_index_is_named_first(make_job, index, cause):
    job = plain_job(make_job, "argv_echo.py")
    (job.root / "code" / "requirements.txt").write_text("opentc-never-published-package==1.0\n")
    result = run_train(job, PIP_INDEX_URL=index, PIP_FIND_LINKS="", PIP_EXTRA_INDEX_URL="",
                       PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="1", PIP_TIMEOUT="2")
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]
    lines = job.failure[:FAILURE_REASON].splitlines()
    assert lines[1].startswith("the package index could not be reached (/simple/opentc-never-published-package/)")
    assert cause in lines[1], lines
    assert "No matching distribution found" in job.failure     # pip's own words follow

"""Issue 40 E: a file of the job's is read only when it is a regular file, and only up to a bound
(opentc_toolkit.job_files.read_regular). A FIFO as hyperparameters.json or as the entry script hung the dry run and
the job for ever; resourceconfig.json linked to /dev/zero read until memory ran out. The rule value by value, in
this process (each read in a thread, so that a read that blocks fails the test instead of hanging it), and one
real `train` job on a FIFO entry script. Issue 40 D, requirements.txt, is read by the same rule."""

from __future__ import annotations

import os
import threading

import pytest

from conftest import run_train
from opentc_launcher import exit_codes
from opentc_toolkit.aws_launcher import calls_sm_dist
from opentc_toolkit.job import HYPERPARAMETERS, RESOURCE_CONFIG, JobPaths, read_job
from opentc_toolkit.job_files import read_regular
from opentc_toolkit.not_started import BadInput

SECONDS = 20   # a read that has not returned by then is blocked for good


def returns(call):
    """What `call()` returns or raises, from a thread: a call still running after SECONDS fails the test."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as e:  # noqa: BLE001
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(SECONDS)
    assert not thread.is_alive(), f"still reading after {SECONDS} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def refusal(call) -> str:
    with pytest.raises(BadInput) as refused:
        returns(call)
    return str(refused.value)


def test_a_regular_file_and_a_link_to_one_are_read(tmp_path):
    (tmp_path / "f").write_bytes(b"{}")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read_regular(str(tmp_path / "f"), "f", 2, "x") == b"{}"
    assert read_regular(str(tmp_path / "link"), "link", 2, "x") == b"{}"


def test_a_missing_file_is_left_to_the_caller(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular(str(tmp_path / "none"), "none", 10, "x")
    (tmp_path / "dangling").symlink_to(tmp_path / "none")
    with pytest.raises(FileNotFoundError):
        read_regular(str(tmp_path / "dangling"), "dangling", 10, "x")


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    message = refusal(lambda: read_regular(str(tmp_path / "pipe"), "input/config/x.json", 10, "an object"))
    assert message == "input/config/x.json is a FIFO (named pipe): it must be a regular file holding an object."


def test_a_device_is_refused_unread(tmp_path):
    (tmp_path / "zero").symlink_to("/dev/zero")
    message = refusal(lambda: read_regular(str(tmp_path / "zero"), "z", 10, "an object"))
    assert message == "z is a device: it must be a regular file holding an object."


def test_a_folder_is_refused(tmp_path):
    assert refusal(lambda: read_regular(str(tmp_path), "d", 10, "an object")) == \
        "d is a folder, not a file: it must be a regular file holding an object."


def test_a_file_past_the_bound_is_refused_and_one_at_it_read(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 11)
    assert refusal(lambda: read_regular(str(tmp_path / "f"), "f", 10, "an object")) == \
        "f is larger than 10 bytes, the most read of it: it must hold an object."
    assert read_regular(str(tmp_path / "f"), "f", 11, "an object") == b"x" * 11


@pytest.mark.parametrize("name", [HYPERPARAMETERS, RESOURCE_CONFIG])
def test_a_job_file_that_is_a_fifo_or_a_device_is_named(make_job, name):
    job = make_job()
    path = job.config / name
    path.unlink()
    os.mkfifo(path)
    message = refusal(lambda: read_job(JobPaths(str(job.root))))
    assert message.startswith(f"job file input/config/{name} is a FIFO (named pipe): it must be a regular file "
                              f"holding an object"), message
    path.unlink()
    path.symlink_to("/dev/zero")
    assert refusal(lambda: read_job(JobPaths(str(job.root)))).startswith(
        f"job file input/config/{name} is a device: it must be a regular file holding an object")


def test_an_entry_script_that_is_a_fifo_is_no_aws_launcher_and_is_not_read(tmp_path):
    os.mkfifo(tmp_path / "train.py")
    assert returns(lambda: calls_sm_dist(str(tmp_path / "train.py"))) is False


def test_a_job_whose_entry_script_is_a_fifo_is_refused_not_hung(make_job):
    """The dry run plans through the same steps (plan.plan_job); the job is the one a user waits on."""
    job = make_job()
    script = job.root / "code" / "train.py"
    script.unlink()
    os.mkfifo(script)
    result = run_train(job, timeout=120)
    assert result.returncode == exit_codes.BAD_INPUT, result.output[-3000:]
    assert "training script 'train.py' in" in job.failure and "is not a regular file" in job.failure, job.failure


def test_a_training_script_the_job_cannot_read_is_refused_before_the_launch(tmp_path, monkeypatch):
    """Issue 51 (4): a train.py only another user can read passed the dry run and ended the job in the worker. The
    job and the dry run both plan through entry_point_path. Root reads any file, so the error the open meets is made
    here."""
    import types

    from opentc_toolkit import source
    from opentc_toolkit.source import entry_point_path

    (tmp_path / "train.py").write_text("print('hello')\n")
    job = types.SimpleNamespace(entry_point="train.py")
    assert entry_point_path(job, str(tmp_path)) == str(tmp_path / "train.py")
    real_open = os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith("train.py"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(source.os, "open", refused)
    assert refusal(lambda: entry_point_path(job, str(tmp_path))) == (
        f"training script 'train.py' in {tmp_path} cannot be opened (PermissionError: Permission denied): it must be "
        f"a file the job's user (uid {os.getuid()}) can read.")


# --- issue 40 D: requirements.txt that cannot be read is a named refusal, in the dry run and the job ---

def requirements_refusal(path, name="requirements.txt") -> str:
    from opentc_toolkit.requirements_install import check_requirements

    return refusal(lambda: check_requirements(str(path), name, {}, {}))


def test_requirements_that_cannot_be_read_are_named_with_what_is_accepted(tmp_path, monkeypatch):
    """The dry run ended in a PermissionError traceback and the job in "the toolkit failed" (exit 1). Root reads any
    file, so the error the open meets is made here."""
    from opentc_toolkit import job_files

    path = tmp_path / "requirements.txt"
    path.write_text("six\n")

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    with monkeypatch.context() as patched:
        patched.setattr(job_files.os, "open", refused)
        assert requirements_refusal(path) == (
            "requirements.txt in the code folder cannot be opened (PermissionError: Permission denied): it must be a "
            "regular file the job can read, holding pip requirements, one per line.")


def test_requirements_that_are_no_regular_file_are_named_never_skipped_or_read(tmp_path):
    path = tmp_path / "requirements.txt"
    os.mkfifo(path)
    assert requirements_refusal(path) == ("requirements.txt in the code folder is a FIFO (named pipe): it must be a "
                                          "regular file holding pip requirements, one per line.")
    path.unlink()
    path.mkdir()
    assert requirements_refusal(path).startswith("requirements.txt in the code folder is a folder, not a file")
    path.rmdir()
    path.symlink_to(tmp_path / "nowhere.txt")
    assert requirements_refusal(path) == (
        f"requirements.txt in the code folder is a symbolic link to '{tmp_path / 'nowhere.txt'}', which does not "
        f"exist: it must be a regular file holding pip requirements, one per line.")
    path.unlink()
    path.write_bytes(b"six\n" * (2**20 // 4 + 1))
    assert requirements_refusal(path).startswith("requirements.txt in the code folder is larger than 1 MiB")


def test_a_dry_run_names_requirements_that_are_no_file(make_job):
    from test_dry_run import dry_run

    job = make_job(script="argv_echo.py")
    (job.root / "code" / "requirements.txt").mkdir()
    done = dry_run(job)
    assert done.returncode == exit_codes.BAD_INPUT, done.stdout + done.stderr[-3000:]
    assert "requirements.txt in the code folder is a folder, not a file" in done.stderr
    assert "Traceback" not in done.stderr

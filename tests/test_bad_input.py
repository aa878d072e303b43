"""Bad input never exits 0: job files, hyperparameters and OPENTC_* variables a user could plausibly get wrong.

Each case runs the real `train` entry on a real job folder and expects exit code 2, a failure file that
names the input and what is accepted, nothing started, and no traceback of the toolkit's in the log.
"""

import json
import os
import stat
import sys

import pytest

from conftest import BIN, TRAINING_MODULE, logged_failure, read_only, run_train
from opentc_launcher import exit_codes


@pytest.fixture
def sagemaker_training_entry(tmp_path):
    """sagemaker-training's own entry, `python -m sagemaker_training.cli.train`, as a command `run_train` starts (its
    console script `train` is replaced by the toolkit's when the toolkit installs)."""
    command = tmp_path / "sagemaker-training-train"
    command.write_text(f"#!/bin/sh\nexec {sys.executable} -m sagemaker_training.cli.train \"$@\"\n")
    command.chmod(command.stat().st_mode | stat.S_IXUSR)
    return command


def bad_job(make_job, compiler=False):
    return make_job(script="argv_echo.py", sagemaker_training_compiler_enabled=compiler)


def assert_refused(job, result, *expected):
    assert result.returncode == exit_codes.BAD_INPUT, result.output[-3000:]
    failure = job.failure
    assert failure is not None, result.output[-3000:]
    assert failure.startswith("Training not started: "), failure
    for text in expected:
        assert text in failure[:1024], failure
    assert not (job.model / "argv.json").exists()             # nothing started
    assert "Traceback" not in result.output and "Framework Error" not in result.output, result.output[-3000:]
    assert logged_failure(result.output).rstrip() == failure[:1024].rstrip()   # the log ends with it
    assert not job.succeeded


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("hyperparameters.json", "{not json", ("input/config/hyperparameters.json cannot be read as JSON",
                                           "JSON-encoded strings")),
    ("hyperparameters.json", "", ("input/config/hyperparameters.json cannot be read as JSON",)),
    ("hyperparameters.json", '["epochs", "3"]', ("input/config/hyperparameters.json holds a JSON list, not an "
                                                 "object",)),
    ("resourceconfig.json", None, ("job file missing: input/config/resourceconfig.json",)),
    ("inputdataconfig.json", None, ("job file missing: input/config/inputdataconfig.json", "{}")),
    ("hyperparameters.json", None, ("job file missing: input/config/hyperparameters.json",)),
    ("resourceconfig.json", '{"current_host": "algo-1", "hosts": []}',
     ('"hosts" is []; it must be a non-empty list of host names',)),
    ("resourceconfig.json", '{"hosts": ["algo-1"]}', ('"current_host" is None; it must be one of hosts',)),
    ("inputdataconfig.json", '"train"', ("input/config/inputdataconfig.json holds a JSON str",)),
])
def test_a_broken_job_file_is_named(make_job, name, content, expected):
    job = bad_job(make_job)
    path = job.config / name
    if content is None:
        path.unlink()
    else:
        path.write_text(content)
    assert_refused(job, run_train(job), *expected)


def test_without_an_output_folder_the_failure_file_is_still_written_and_a_stale_verdict_goes(make_job):
    job = bad_job(make_job)
    (job.config / "hyperparameters.json").write_text("[]")
    assert not job.output.exists()
    assert_refused(job, run_train(job), "holds a JSON list")
    (job.output / "failure").unlink()
    (job.output / "success").write_text("")                    # left by an earlier run
    assert_refused(job, run_train(job), "holds a JSON list")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("a=b", '"1"', "hyperparameter name 'a=b' is not accepted"),
    ("nul\u0000key", '"1"', "hyperparameter name 'nul\\x00key' is not accepted"),
    ("note", '"a\\u0000b"', "hyperparameter note holds a NUL character"),
    ("blob", "1 MiB", "hyperparameter blob is 1048576 bytes long on the command line"),
], ids=["equals-in-name", "nul-in-name", "nul-in-value", "1-MiB-value"])
def test_a_hyperparameter_the_os_cannot_carry_is_named(make_job, key, value, expected):
    job = bad_job(make_job)
    if value == "1 MiB":   # built here: a parameter this long would not fit in pytest's own environment
        value = json.dumps("x" * 1_048_576)
    job.write_hyperparameters({**job.hyperparameters(), key: value})
    assert_refused(job, run_train(job), expected)


@pytest.mark.parametrize(("name", "value"), [
    ("OPENTC_TERMINATION_GRACE", "nan"), ("OPENTC_TERMINATION_GRACE", "-1"), ("OPENTC_PEER_TIMEOUT", "nan"),
    ("OPENTC_PEER_TIMEOUT", "inf"), ("OPENTC_WORKERS_PER_HOST", "-2"), ("OPENTC_WORKERS_PER_HOST", "1e9"),
])
def test_a_non_finite_or_negative_opentc_variable_is_named(make_job, name, value):
    job = bad_job(make_job)
    assert_refused(job, run_train(job, **{name: value}), f"environment variable {name}={value!r} is not accepted")


def test_a_number_hyperparameter_that_is_not_a_plain_whole_number_is_named(make_job):
    """One real job; each kind of value that is not a plain whole number is a case of the rule's own unit test
    (tests/test_compiler_settings.py)."""
    job = bad_job(make_job, compiler=True)
    job.set_hyperparameters(sagemaker_training_compiler_max_compilations="7" * 5000)
    assert_refused(job, run_train(job), "hyperparameter sagemaker_training_compiler_max_compilations has the value",
                   "use a whole number >= 0 in digits 0-9")


@pytest.mark.parametrize("value", ["²", "7" * 5000])
def test_a_workers_per_host_variable_that_is_no_number_is_named(make_job, value):
    job = bad_job(make_job)
    assert_refused(job, run_train(job, OPENTC_WORKERS_PER_HOST=value),
                   "environment variable OPENTC_WORKERS_PER_HOST=", "is not accepted: use a whole number")


@pytest.mark.parametrize("compiler", [True, False], ids=["compiler on", "compiler off"])
def test_an_output_data_folder_that_cannot_be_written_is_named(make_job, compiler):
    job = bad_job(make_job, compiler=compiler)
    data = job.output / "data"
    data.mkdir(parents=True)
    with read_only(data):
        result = run_train(job)
    assert_refused(job, result, f"the job folder cannot hold its output: nothing can be written in {data}",
                   "output/data must be a writable folder")


def test_more_workers_than_any_host_can_run_is_refused_before_anything_starts(make_job):
    job = bad_job(make_job)
    job.set_hyperparameters(sagemaker_pytorch_xla_multi_worker_enabled=True)
    result = run_train(job, timeout=120, OPENTC_WORKERS_PER_HOST="100000")
    assert_refused(job, result, "OPENTC_WORKERS_PER_HOST asks for 100000 workers on this host, more than any host can "
                                "run", "Use one worker per GPU, or on CPUs one per core")
    assert result.seconds < 60


def test_a_refusal_of_the_settings_comes_before_requirements_txt_is_installed(make_job):
    """Issue 31 B: the worker count (and every other setting the launch plan decides) is refused before pip runs:
    here pip would have failed (exit code 1) on a package it cannot find, offline."""
    job = bad_job(make_job)
    job.set_hyperparameters(sagemaker_torch_distributed_enabled=True)
    (job.root / "code" / "requirements.txt").write_text("--no-index\nopentc-no-such-package==1.0\n")
    result = run_train(job, timeout=120, OPENTC_WORKERS_PER_HOST="100000")
    assert_refused(job, result, "OPENTC_WORKERS_PER_HOST asks for 100000 workers on this host")
    assert "requirements.txt" not in result.output and "pip" not in result.output, result.output[-3000:]


def test_a_requirement_that_would_move_torch_is_refused_naming_the_pin(make_job):
    """However it is written (a file it includes, a continuation line, pip-compile's hashes: test_requirements_file.py
    has each), pip reads it, so it is refused before pip runs."""
    import importlib.metadata as metadata

    job = bad_job(make_job)
    (job.root / "code" / "requirements.txt").write_text("# ours\n-r pinned.txt\ntransformers\n")
    (job.root / "code" / "pinned.txt").write_text("torch==1.0 \\\n    --hash=sha256:00\n")
    pinned = metadata.version("torch")
    assert_refused(job, run_train(job), "requirements.txt asks for 'torch==1.0' (pinned.txt line 1 (from "
                                        f"requirements.txt line 2); this image pins torch=={pinned})")


def test_a_requirements_file_that_is_not_utf8_is_refused_naming_the_byte(make_job):
    job = bad_job(make_job)
    (job.root / "code" / "requirements.txt").write_bytes(b"six  # caf\xe9\n")
    assert_refused(job, run_train(job), "requirements.txt in the code folder is not UTF-8 (pip reads it as UTF-8",
                   "byte 0xe9 at offset 10 (line 1) cannot be decoded. Save it as UTF-8")


def test_sagemaker_trainings_own_entry_keeps_a_failing_exit_code(make_job, sagemaker_training_entry):
    """sagemaker-training's own entry with SAGEMAKER_TRAINING_MODULE lands in the toolkit, which ends the process
    with the job's exit code: the trainer's `finally` (sys.exit(0) when its bookkeeping fails) cannot replace it."""
    job = make_job(script="crash.py", sagemaker_training_compiler_enabled=False)
    result = run_train(job, command=sagemaker_training_entry)
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]
    assert "ValueError: batch 7 has 3 columns, expected 4" in job.failure.splitlines()[1]
    assert "Framework Error" not in result.output and "Framework Error" not in job.failure
    assert f"Imported framework {TRAINING_MODULE.split(':')[0]}" in result.output


def test_every_train_installed_is_the_toolkits_and_fails_loudly_on_a_broken_job(make_job):
    """sagemaker-training's own console script exits 0, printing nothing, when hyperparameters.json is not JSON and
    output/ is missing (its failure-file write raises inside its except; its finally exits 0). The toolkit installs
    a `train` of its own over it, so every `train` in the venv (and the image) is the toolkit's."""
    assert "from opentc_toolkit.entry import main" in (BIN / "train").read_text()
    job = bad_job(make_job)
    (job.config / "hyperparameters.json").write_text("{not json")
    assert not job.output.exists()
    assert_refused(job, run_train(job, command=BIN / "train"), "hyperparameters.json cannot be read as JSON")


@pytest.mark.parametrize(("value", "kind"), [("3", "a JSON number"), ('["train.py"]', "a JSON array")])
def test_a_sagemaker_program_that_is_not_a_string_is_named(make_job, value, kind):
    job = bad_job(make_job)
    job.write_hyperparameters({**job.hyperparameters(), "sagemaker_program": value})
    assert_refused(job, run_train(job), f"hyperparameter sagemaker_program is {json.dumps(json.loads(value))} "
                                        f"({kind}), not a string")


@pytest.mark.parametrize("raw", ['"\\ud83d"', '"caf\\udce9"', '["ok", "\\ud800"]'], ids=["high", "low", "nested"])
def test_a_hyperparameter_with_an_unpaired_surrogate_is_named(make_job, raw):
    job = bad_job(make_job)
    job.write_hyperparameters({**job.hyperparameters(), "note": raw})
    assert_refused(job, run_train(job), "hyperparameter note holds an unpaired surrogate")


def test_duplicate_hosts_are_refused(make_job):
    job = bad_job(make_job)
    job.set_hosts(["algo-1", "algo-2", "algo-1"], current="algo-1")
    assert_refused(job, run_train(job), "\"hosts\" names 'algo-1' more than once")


@pytest.mark.parametrize("port", ["70000", "0"])
def test_a_master_port_out_of_range_is_named(make_job, port):
    job = bad_job(make_job)
    assert_refused(job, run_train(job, MASTER_PORT=port),
                   f"environment variable MASTER_PORT='{port}' is not accepted: use a whole number from 1 to 65535")


@pytest.mark.parametrize("what", ["folder", "dangling-link"])
def test_a_program_that_is_not_a_file_is_called_what_it_is(make_job, what):
    job = bad_job(make_job)
    path = job.root / "code" / "entry.py"
    if what == "folder":
        path.mkdir()
        expected = "training script 'entry.py' in {} is a folder, not a Python file"
    else:
        os.symlink("/nowhere/entry.py", path)
        expected = "training script 'entry.py' in {} is a symbolic link to '/nowhere/entry.py', which does not exist"
    job.set_hyperparameters(sagemaker_program="entry.py")
    result = run_train(job)
    assert_refused(job, result, expected.format(job.root / "code"))
    assert "not found" not in job.failure


def test_an_unknown_compiler_backend_is_named_with_both_accepted(make_job):
    job = bad_job(make_job, compiler=True)
    job.set_hyperparameters(sagemaker_training_compiler_backend="tvm")
    assert_refused(job, run_train(job), "hyperparameter sagemaker_training_compiler_backend has the value \"tvm\", "
                                        "which is not accepted: use one of \"xla\", \"inductor\".")

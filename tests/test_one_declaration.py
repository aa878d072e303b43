"""Issue 41: a new hyperparameter costs one declaration. A fixture declares a worker option the image does not have
(a field of WorkerOptions with a `setting`, as docs/contributing-map.md says), through a sitecustomize that extends
the launcher's class before anything imports it; nothing else is touched. The real `train --dry-run` and the docs'
table then know it: its key, its parsing, its default, its way onto the worker's command line and its row."""

import os
import subprocess
import sys

import pytest

from conftest import TRAIN, train_env

EXTENSION = '''
from dataclasses import make_dataclass

import opentc_launcher.options as options

options.WorkerOptions = make_dataclass("WorkerOptions", [(
    "prefetch_batches", int, options._option(
        2, kind=options.WHOLE, metavar="N", help="batches each worker loads ahead",
        setting=options.AsSetting("batches each worker loads ahead of the step", "two")))],
    bases=(options.WorkerOptions,), frozen=True)
'''


@pytest.fixture
def declared(tmp_path):
    folder = tmp_path / "declared"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(EXTENSION)
    return str(folder)


def test_a_worker_option_declared_once_is_a_hyperparameter_with_its_parsing_docs_row_and_argv(make_job, declared):
    job = make_job(script="argv_echo.py", sagemaker_training_compiler_prefetch_batches=7)
    env = train_env(job, PYTHONPATH=os.pathsep.join(filter(None, [declared, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([str(TRAIN), "--dry-run", str(job.root)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sagemaker_training_compiler_prefetch_batches = 7 (from the job)" in done.stdout, done.stdout
    command = done.stdout.split("command (in ", 1)[1].splitlines()[1]
    assert "--prefetch-batches 7" in command, command
    job.set_hyperparameters(sagemaker_training_compiler_prefetch_batches="many")   # parsed by its kind
    refused = subprocess.run([str(TRAIN), "--dry-run", str(job.root)], env=env, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2 and "hyperparameter sagemaker_training_compiler_prefetch_batches has the value " \
        "\"many\", which is not accepted: use a whole number" in refused.stderr, refused.stderr[-3000:]
    rows = subprocess.run([sys.executable, "-c", "from opentc_toolkit.settings_table import worker_setting_rows; "
                                                 "print('\\n'.join(worker_setting_rows()))"],
                          env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "| `sagemaker_training_compiler_prefetch_batches` | `2` (two) | batches each worker loads ahead of the " \
           "step |" in rows, rows

"""Issue 41: a new hyperparameter costs one declaration. A fixture declares a worker option the image does not have
(a field of WorkerOptions with a `setting`, as docs/contributing-map.md says), through a sitecustomize that extends
the launcher's class before anything imports it; nothing else is touched. The real `train --dry-run` and the docs'
table then know it: its key, its parsing, its default, its way onto the worker's command line and its row."""

import os
import subprocess
import sys

import pytest

from conftest import BIN, TRAIN, clean_env, train_env

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


ONE_BACKENDS = '''
from dataclasses import make_dataclass

import opentc_launcher.options as options

options.WorkerOptions = make_dataclass("WorkerOptions", [(
    "fusion_depth", int, options._option(
        3, kind=options.WHOLE, metavar="N", help="how deep the fuser looks", backend="{backend}"))],
    bases=(options.WorkerOptions,), frozen=True)
'''


@pytest.mark.parametrize("backend", ["inductor", "tvm"])
def test_a_backends_own_option_joins_its_group_and_leaves_the_others_alone(tmp_path, backend):
    """Issue 41: per-backend option groups. An option declared for one backend is listed in that backend's group
    of opentc-run's options, the others' groups unchanged; one declared for a backend there is not is refused,
    naming the backends there are."""
    folder = tmp_path / "declared"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(ONE_BACKENDS.replace("{backend}", backend))
    env = clean_env(PYTHONPATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([str(BIN / "opentc-run"), "--help"], env=env, capture_output=True, text=True, timeout=120)
    if backend == "tvm":
        assert done.returncode != 0
        assert "worker option fusion_depth is declared for backend 'tvm', which is not one of eager, xla, " \
               "inductor" in done.stderr, done.stderr[-2000:]
        return
    assert done.returncode == 0, done.stderr[-2000:]
    groups = {block.split(":", 1)[0]: block for block in done.stdout.split("\n\n") if block.startswith("worker")}
    assert "--fusion-depth N" in groups["worker options for --backend inductor only"], groups
    assert "--fusion-depth" not in groups["worker options"] + groups["worker options for --backend xla only"]
    assert "--cpu-multi-worker" in groups["worker options for --backend xla only"], groups

"""`opentc-train --dry-run`: the launch plan a job would run, printed from the real job files through the real entry,
with nothing run, installed or written, and bad input refused as the job would refuse it (same exit code, same
words), on stderr, with no failure file."""

import json
import os
import shutil
import subprocess

import pytest
from test_model_trainer import v3_job

from conftest import TRAIN, read_only, run_train, train_env, tree
from opentc_toolkit.job import JobPaths
from opentc_toolkit.not_started import BadInput
from opentc_toolkit.output_folders import check_output_folders

pytestmark = [pytest.mark.xla]


def dry_run(job, **extra_env):
    return subprocess.run([str(TRAIN), "--dry-run", str(job.root)], env=train_env(job, **extra_env),
                          cwd=str(job.root), capture_output=True, text=True, timeout=120)


def test_the_plan_names_settings_and_their_sources_the_command_and_the_environment_and_writes_nothing(make_job):
    job = make_job(script="argv_echo.py", sagemaker_training_compiler_max_compilations=7, epochs=2)
    (job.root / "code" / "requirements.txt").write_text("six\n")
    before = tree(job.root)
    done = dry_run(job, OPENTC_PEER_TIMEOUT="12", RANK="3")
    assert done.returncode == 0, done.stderr[-3000:]
    plan = done.stdout
    assert "sagemaker_training_compiler_enabled = true (from the job)" in plan, plan
    assert "sagemaker_training_compiler_max_compilations = 7 (from the job)" in plan, plan
    assert "sagemaker_training_compiler_library_patches = true (default)" in plan, plan
    assert "OPENTC_PEER_TIMEOUT = 12.0 (from the container)" in plan, plan
    assert "MASTER_PORT = 7777 (default)" in plan, plan
    assert "installed first: requirements.txt from the code folder" in plan, plan
    assert f"machine: {len(os.sched_getaffinity(0))} CPUs; no GPU; torch built for " in plan, plan   # issue 41
    command = plan.split("command (in ", 1)[1].splitlines()[1]
    assert "opentc-worker --backend xla" in command and "--max-compilations 7" in command, command
    assert command.endswith(f"{job.root}/code/argv_echo.py --epochs 2"), command
    assert "<run folder>/worker-records" in command, command       # the run's own folder, not a path that is gone
    environment = plan.split("environment, against the container's:\n", 1)[1].splitlines()
    assert "  + USE_TORCH_XLA=1" in environment, environment
    assert f"  + SM_MODEL_DIR={job.model}" in environment, environment
    assert "  + MASTER_ADDR=algo-1" in environment and "  + MASTER_PORT=7777" in environment, environment
    assert "  - RANK (the container's '3' is not passed on)" in environment, environment
    assert tree(job.root) == before                                # nothing written, nothing installed
    assert not (job.model / "argv.json").exists()


def test_several_workers_are_planned_through_opentc_run(make_job):
    job = make_job(script="argv_echo.py", sagemaker_training_compiler_enabled=False,
                   sagemaker_torch_distributed_enabled=True)
    done = dry_run(job, OPENTC_WORKERS_PER_HOST="2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "world: 1 host(s) x 2 worker(s) = 2" in done.stdout, done.stdout
    assert ("distribution: data-parallel workers, one per device, asked by sagemaker_torch_distributed_enabled"
            in done.stdout), done.stdout
    command = done.stdout.split("command (in ", 1)[1].splitlines()[1]
    assert "opentc-run --nproc-per-node 2" in command and "--standalone" in command, command


@pytest.mark.parametrize("backend", ["xla", "inductor"])
def test_debug_modes_switches_are_listed_as_each_worker_will_set_them(make_job, backend):
    """The workers set debug mode's variables in their own processes (the backend's session), so the environment above
    does not hold them; the dry run lists them as a worker would settle them against the container's."""
    job = make_job(script="argv_echo.py", sagemaker_training_compiler_debug_mode=True,
                   sagemaker_training_compiler_backend=backend)
    done = dry_run(job, XLA_FLAGS="--xla_cpu_use_thunk_runtime=false", TORCH_LOGS="dynamo")
    assert done.returncode == 0, done.stderr[-3000:]
    listed = done.stdout.split("debug mode: each worker sets these in its own process", 1)[1].splitlines()[1:]
    folder = job.compiler_output
    if backend == "xla":
        assert "  + PT_XLA_DEBUG_LEVEL=1" in listed, listed
        assert f"  + XLA_METRICS_FILE={folder}/XLA_METRICS_FILE.txt" in listed, listed
        assert (f"  + XLA_FLAGS=--xla_cpu_use_thunk_runtime=false --xla_dump_to={folder}/xla_dump" in listed), listed
        assert (f"  = XLA_FLAGS=--xla_cpu_use_thunk_runtime=false: keeping it, with --xla_dump_to={folder}/xla_dump "
                f"added") in listed, listed
    else:
        assert f"  + TORCH_TRACE={folder}/torch_trace" in listed, listed
        assert "  = TORCH_LOGS=dynamo: keeping it" in listed, listed
        assert not [line for line in listed if "XLA" in line], listed
    without = dry_run(make_job(script="argv_echo.py", sagemaker_training_compiler_backend=backend))
    assert without.returncode == 0 and "debug mode:" not in without.stdout, without.stdout


@pytest.mark.parametrize(("hyperparameters", "expected"), [
    ({"sagemaker_training_compiler_max_compilations": "1.5"},
     "hyperparameter sagemaker_training_compiler_max_compilations has the value"),
    ({"sagemaker_training_compiler_enable": True}, "unknown hyperparameter sagemaker_training_compiler_enable"),
], ids=["not a whole number", "a typo"])
def test_bad_input_is_refused_as_the_job_would_be_on_stderr_without_a_failure_file(make_job, hyperparameters,
                                                                                  expected):
    job = make_job(script="argv_echo.py", **hyperparameters)
    done = dry_run(job)
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert expected in done.stderr, done.stderr[-3000:]
    assert done.stdout == ""
    assert job.failure is None and not job.succeeded


def test_a_requirement_that_would_move_torch_is_refused_before_paying(make_job):
    job = make_job(script="argv_echo.py")
    (job.root / "code" / "requirements.txt").write_text("-c pins.txt\n")
    (job.root / "code" / "pins.txt").write_text("torch==1.13.1\t# the old one\n")
    done = dry_run(job)
    assert done.returncode == 2, done.stdout
    assert ("requirements.txt asks for 'torch==1.13.1' (pins.txt line 1 (from requirements.txt line 1); this image "
            "pins torch==") in done.stderr, done.stderr[-3000:]
    assert json.loads((job.config / "hyperparameters.json").read_text())   # the job is as it was


def test_the_ledger_is_listed_for_the_versions_a_requirements_txt_would_install(make_job):
    """Issue 53: a job pinned to transformers 4.38.0 (AWS's GPT-2 notebook's) is told before it runs which changes to
    library code are known to apply there, which are not known until it runs, and that the rest stand as tested."""
    job = make_job(script="argv_echo.py")
    (job.root / "code" / "requirements.txt").write_text("transformers==4.38.0  # AWS's notebook\ndatasets\n")
    done = dry_run(job)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = done.stdout.split("library changes (xla: what the workers change in libraries' code, on the versions "
                               "the job would run", 1)[1].splitlines()[1:]
    assert ("  patch transformers-4-fp16-on-xla (transformers.training_args.get_xla_device_type): applies "
            "(transformers 4.38.0: tests/test_aws_examples.py: AWS's GPT-2 notebook (run_clm.py))") in listed, listed
    assert ("  patch transformers-masks-on-device (transformers.masking_utils.is_tracing): not known for transformers "
            "4.38.0 (requirements.txt): its guard decides when the job starts") in listed, listed
    assert ("  patch safetensors-save-from-xla (safetensors.torch._flatten_as_ptr): applies (safetensors 0.8.0: the "
            "images' own version, tested)") in listed, listed
    assert any(line.startswith("  observer host-reads-counted (torch.Tensor.item, ") and line.endswith(
        "(stays with the patches off)") for line in listed), listed


def test_a_requirements_file_that_is_not_utf8_is_refused_as_the_job_refuses_it(make_job):
    job = make_job(script="argv_echo.py")
    (job.root / "code" / "requirements.txt").write_bytes(b"six  # caf\xe9\n")
    done = dry_run(job)
    assert done.returncode == 2, done.stdout
    assert "requirements.txt in the code folder is not UTF-8 (pip reads it as UTF-8" in done.stderr
    assert "byte 0xe9 at offset 10 (line 1)" in done.stderr and "Traceback" not in done.stderr


# --- issue 40 C: the dry run refuses what the job refuses, and names the folder the job runs from ---

def output_is_a_file(job) -> str:
    shutil.rmtree(job.output, ignore_errors=True)
    job.output.write_text("not a folder")
    return f"the job folder cannot hold its output: {job.output / 'data'} cannot be created ({job.output} is a file"


def model_is_a_file(job) -> str:
    shutil.rmtree(job.model, ignore_errors=True)
    job.model.write_text("not a folder")
    return f"the job folder cannot hold its output: {job.model} cannot be created ({job.model} is a file, not a folder)"


@pytest.mark.parametrize("damage", [output_is_a_file, model_is_a_file], ids=["output", "model"])
def test_an_output_folder_that_is_a_file_is_refused_by_the_dry_run_and_the_job_in_the_same_words(make_job, damage):
    job = make_job(script="argv_echo.py")
    expected = damage(job)
    before = tree(job.root)
    done = dry_run(job)
    assert done.returncode == 2 and expected in done.stderr, done.stdout + done.stderr[-3000:]
    assert tree(job.root) == before
    result = run_train(job)   # (with output/ a file, its failure is only in the log)
    assert result.returncode == 2 and expected in result.output, result.output[-3000:]


def test_a_read_only_output_data_is_refused_by_the_dry_run(make_job):
    job = make_job(script="argv_echo.py")
    data = job.output / "data"
    data.mkdir(parents=True)
    with read_only(data):
        done = dry_run(job)
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    # The words of tests/test_bad_input.py's job on the same folder.
    assert (f"the job folder cannot hold its output: nothing can be written in {data} (OSError: Read-only file "
            f"system); output/data must be a writable folder") in done.stderr, done.stderr[-3000:]


def test_an_sdk_v3_job_is_planned_from_the_folder_it_runs_from(make_job):
    """The code channel is put into the (empty) code folder and runs from there; the plan said the dry run's own
    temporary folder."""
    job = v3_job(make_job, "argv_echo.py")
    shutil.rmtree(job.root / "code")
    (job.root / "code").mkdir()
    done = dry_run(job)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"command (in {job.root / 'code'}):" in done.stdout, done.stdout
    command = done.stdout.split("command (in ", 1)[1].splitlines()[1]
    assert command.endswith(f"{job.root / 'code' / 'argv_echo.py'}"), command
    assert list((job.root / "code").iterdir()) == []                 # and nothing was put there


@pytest.mark.parametrize("create", [False, True], ids=["dry run", "job"])
def test_the_output_folders_rule_value_by_value(tmp_path, create):
    """output_folders.check_output_folders, in this process: what the dry run predicts is what the job finds."""
    paths = JobPaths(str(tmp_path / "job"))

    def refusal(compiler_on=True):
        with pytest.raises(BadInput) as refused:
            check_output_folders(paths, compiler_on, create)
        return str(refused.value)

    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "output").write_text("")
    assert f"{paths.output_data} cannot be created ({paths.output} is a file, not a folder)" in refusal()
    (tmp_path / "job" / "output").unlink()
    (tmp_path / "job" / "output").mkdir()
    (tmp_path / "job" / "output" / "data").mkdir()
    (tmp_path / "job" / "output" / "data" / "compiler").write_text("")
    assert f"{paths.compiler_output} cannot be created ({paths.compiler_output} is a file" in refusal()
    before = tree(tmp_path)
    check_output_folders(paths, compiler_on=False, create=create)   # the compiler's folder is not the job's then
    assert (tree(tmp_path) == before) != create                      # the job made model/; the dry run nothing

"""Jobs written for AWS's Training Compiler images whose entry point is the PyTorch 1.10-era distributed launcher
(`python -m torch_xla.distributed.sm_dist`, a module only AWS's torch-xla fork had): they run unmodified.

The pure translation first, on real files in a real code folder; then whole jobs through the real `train`.
"""

import shutil
from types import MappingProxyType

import pytest

from conftest import SCRIPTS, logged_failure, no_torch_xla, run_train
from opentc_launcher import exit_codes
from opentc_launcher.host import HostFacts
from opentc_toolkit.aws_launcher import adapt_aws_launcher, convert_arguments
from opentc_toolkit.distributions import Distribution
from opentc_toolkit.job import JobPaths, TrainingJob
from opentc_toolkit.job_settings import JobSettings
from opentc_toolkit.not_started import BadInput
from opentc_toolkit.plan import LaunchSettings, plan_world
from opentc_toolkit.quoted import quoted

pytestmark = [pytest.mark.xla]

LAUNCHER = "aws_distributed_launcher.py"
TRAIN_SCRIPT = "aws_era_train.py"


def code_folder(tmp_path, *extra):
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(SCRIPTS / LAUNCHER, code / LAUNCHER)
    shutil.copy(SCRIPTS / TRAIN_SCRIPT, code / TRAIN_SCRIPT)
    for name in extra:
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text("print('hello')\n")
    return code


def job_for(code, args, entry=LAUNCHER, gpus=0):
    return TrainingJob(
        paths=JobPaths(str(code.parent)), entry_point=entry, submit_directory=str(code),
        hyperparameters=MappingProxyType({}), framework_params=MappingProxyType({}), user_args=tuple(args),
        hosts=("algo-1",), current_host="algo-1", machine=HostFacts(cpus=2, gpus=gpus), script_env=MappingProxyType({}))


def test_arguments_are_converted_as_sm_dist_converted_them():
    args = ["--batch_size", "26", "--do_eval", "False", "--fp16", "True", "--learning_rate", "5e-05",
            "--mesh_service_port", "53957", "--n_gpus", "4", "--num_gpus", "2", "--resource_config", "/x.json",
            "--tag", "true", "--training_script", "train.py", "--worker_port", "43857", "-k", "True"]
    script_args, consumed = convert_arguments(args)
    assert script_args == ("--batch_size", "26", "--fp16", "--learning_rate", "5e-05", "--n_gpus", "4",
                           "--tag", "true", "-k")   # order kept; only the exact "True"/"False" are flags
    assert consumed == {"mesh_service_port": "53957", "num_gpus": "2", "resource_config": "/x.json",
                        "training_script": "train.py", "worker_port": "43857"}


def test_a_launcher_job_becomes_its_training_script_with_several_workers(tmp_path):
    code = code_folder(tmp_path)
    job = job_for(code, ["--epochs", "3", "--fp16", "True", "--training_script", TRAIN_SCRIPT,
                         "--worker_port", "43857"], gpus=4)
    adapted = adapt_aws_launcher(job, JobSettings(enabled=True), str(code))
    assert adapted is not None
    assert adapted.job.entry_point == TRAIN_SCRIPT
    assert adapted.job.user_args == ("--epochs", "3", "--fp16")
    assert adapted.job.workers_per_host is None
    assert adapted.settings == JobSettings(enabled=True, distribution=Distribution.XLA_MULTI_WORKER)
    assert adapted.summary.startswith(
        f"AWS-era launcher {LAUNCHER} calls torch_xla.distributed.sm_dist, which upstream torch-xla does not "
        f"have: running training_script={TRAIN_SCRIPT} directly, one worker per GPU, with arguments "
        f"['--epochs', '3', '--fp16']"), adapted.summary
    assert "worker_port ignored" in adapted.summary
    world, _ = plan_world(adapted.job, adapted.settings, LaunchSettings())
    assert world.workers_per_host == 4


def test_num_gpus_is_the_number_of_workers_per_host(tmp_path):
    code = code_folder(tmp_path, "src/train.py")
    job = job_for(code, ["--num_gpus", "2", "--training_script", "src/train.py"], gpus=8)
    adapted = adapt_aws_launcher(job, JobSettings(enabled=True, distribution=Distribution.XLA_MULTI_WORKER), str(code))
    assert adapted is not None
    assert adapted.job.entry_point == "src/train.py" and adapted.job.user_args == ()
    assert adapted.job.workers_per_host == 2 and "2 worker(s) per host (num_gpus=2)" in adapted.summary
    assert plan_world(adapted.job, adapted.settings, LaunchSettings())[0].workers_per_host == 2
    # the operator's OPENTC_WORKERS_PER_HOST still wins
    assert plan_world(adapted.job, adapted.settings, LaunchSettings(workers_per_host=3))[0].workers_per_host == 3


@pytest.mark.parametrize(("gpus", "value"), [(8, "0"), (8, "9"), (8, "two"), (8, "2.0"), (8, ""), (0, "0"), (0, "-1"),
                                        (8, "²"), (0, "7" * 5000)])
def test_bad_num_gpus_is_refused_naming_it(tmp_path, gpus, value):
    code = code_folder(tmp_path)
    job = job_for(code, ["--num_gpus", value, "--training_script", TRAIN_SCRIPT], gpus=gpus)
    with pytest.raises(BadInput) as e:
        adapt_aws_launcher(job, JobSettings(enabled=True), str(code))
    message = str(e.value)
    assert message.startswith(f"hyperparameter num_gpus has the value {quoted(value)}, which is not accepted"), message
    assert ("from 1 to 8 (the GPUs on this host)" if gpus else "a whole number >= 1") in message


def test_num_gpus_above_one_on_a_host_without_gpus_is_left_to_the_cpu_rules(tmp_path):
    code = code_folder(tmp_path)
    job = job_for(code, ["--num_gpus", "2", "--training_script", TRAIN_SCRIPT])
    adapted = adapt_aws_launcher(job, JobSettings(enabled=True), str(code))
    assert adapted is not None and adapted.job.workers_per_host == 2


def test_any_other_entry_point_is_untouched(tmp_path):
    code = code_folder(tmp_path)
    (code / "binary.py").write_bytes(b"\xff\xfe not utf-8 \x00 torch_xla.distributed.xla_spawn\n")
    for entry in (TRAIN_SCRIPT, "binary.py", "missing.py", None):
        job = job_for(code, ["--training_script", TRAIN_SCRIPT], entry=entry)
        assert adapt_aws_launcher(job, JobSettings(enabled=True), str(code)) is None


def test_a_launcher_that_is_not_utf8_is_still_recognised(tmp_path):
    code = code_folder(tmp_path)
    (code / "latin.py").write_bytes(b"# caf\xe9\nimport os\nos.system('python -m torch_xla.distributed.sm_dist')\n")
    job = job_for(code, ["--training_script", TRAIN_SCRIPT], entry="latin.py")
    adapted = adapt_aws_launcher(job, JobSettings(), str(code))
    assert adapted is not None and adapted.job.entry_point == TRAIN_SCRIPT


@pytest.mark.parametrize(("args", "expected"), [
    ([], ("has no hyperparameter training_script: add hyperparameter training_script=<your script>",
          "or make your script the entry point and set distribution pytorchxla enabled")),
    (["--training_script", ""], ("add hyperparameter training_script=<your script>",)),
    (["--training_script", "trian.py"], ('training_script="trian.py" names no file in the code folder',
                                          f"its .py files: {LAUNCHER}, {TRAIN_SCRIPT}, sub/helper.py")),
    (["--training_script", "sub"], ('training_script="sub" names no file',)),
    (["--training_script", "../escape.py"], ('training_script="../escape.py" is outside the code folder',)),
    (["--training_script", "notes.txt"], ('training_script="notes.txt" is not a .py file',)),
    (["--training_script", LAUNCHER], (f'training_script="{LAUNCHER}" is such a launcher too',
                                       "set training_script to your training script itself")),
])
def test_what_to_change_is_named(tmp_path, args, expected):
    code = code_folder(tmp_path, "sub/helper.py", "notes.txt", "__pycache__/x.py")
    (tmp_path / "escape.py").write_text("")
    with pytest.raises(BadInput) as e:
        adapt_aws_launcher(job_for(code, args), JobSettings(enabled=True), str(code))
    message = str(e.value)
    assert message.startswith(f"{LAUNCHER} is an AWS-era distributed launcher: it calls "
                              f"torch_xla.distributed.sm_dist, which upstream torch-xla does not have"), message
    for text in expected:
        assert text in message, message


# Whole jobs through the real `train` entry.

def aws_era_job(make_job, **hyperparameters):
    """The guide's recipe: the launcher as entry point, the real script in training_script, compiler on."""
    job = make_job(script=LAUNCHER, sagemaker_training_compiler_enabled=True, **hyperparameters)
    job.use_script(TRAIN_SCRIPT)
    job.use_script(LAUNCHER)   # the entry point again: the launcher, with the training script beside it
    return job


@pytest.mark.slow
def test_the_guides_launcher_runs_the_training_script_on_xla(make_job):
    job = aws_era_job(make_job, sagemaker_pytorch_xla_multi_worker_enabled=True, training_script=TRAIN_SCRIPT,
                      n_gpus=4, batch_size=26, learning_rate=5e-5, fp16=True, do_eval=False, worker_port=43857)
    result = run_train(job, timeout=120)
    assert result.returncode == 0, result.output[-5000:]
    assert (f"AWS-era launcher {LAUNCHER} calls torch_xla.distributed.sm_dist, which upstream torch-xla does not "
            f"have: running training_script={TRAIN_SCRIPT} directly, one worker per GPU") in result.output
    assert "No module named torch_xla.distributed.sm_dist" not in result.output
    record = job.read_json("output/data/aws-era.json")
    assert record["argv"] == ["--batch_size", "26", "--fp16", "--learning_rate", "5e-05", "--n_gpus", "4"]
    assert record["args"] == {"batch_size": 26, "learning_rate": 5e-05, "n_gpus": 4, "fp16": True,
                              "do_eval": False}
    # through opentc-run (torchrun's variables), one XLA:CPU worker on this host without GPUs
    assert record["env"] == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "PJRT_DEVICE": "CPU"}
    assert "launching 1 worker(s) on this host" in result.output
    assert record["torch_xla_imported_before_script"] is True
    assert record["device"].startswith("xla") and record["sum"] == 12.0
    assert job.succeeded and job.failure is None


def assert_refused(job, result, *expected):
    assert result.returncode == exit_codes.BAD_INPUT, result.output[-3000:]
    failure = job.failure
    assert failure is not None and failure.startswith("Training not started: "), result.output[-3000:]
    for text in expected:
        assert text in failure[:1024], failure
    assert logged_failure(result.output).rstrip() == failure[:1024].rstrip()
    assert not (job.output / "data" / "aws-era.json").exists()   # nothing started
    assert "Traceback" not in result.output, result.output[-3000:]
    assert not job.succeeded


@pytest.mark.parametrize(("hyperparameters", "expected"), [
    ({}, ("add hyperparameter training_script=<your script>", "set distribution pytorchxla enabled")),
    ({"training_script": "train_missing.py"}, ('training_script="train_missing.py" names no file',
                                               f"its .py files: {LAUNCHER}, {TRAIN_SCRIPT}")),
    ({"training_script": LAUNCHER}, (f'training_script="{LAUNCHER}" is such a launcher too',)),
    ({"training_script": TRAIN_SCRIPT, "num_gpus": 0}, ('hyperparameter num_gpus has the value "0"',
                                                        "a whole number >= 1")),
])
def test_a_launcher_job_that_cannot_run_says_what_to_change(make_job, hyperparameters, expected):
    job = aws_era_job(make_job, **hyperparameters)
    assert_refused(job, run_train(job, timeout=60), *expected)


def test_several_workers_asked_by_num_gpus_follow_the_cpu_rules(make_job):
    job = aws_era_job(make_job, training_script=TRAIN_SCRIPT, num_gpus=2)
    assert_refused(job, run_train(job, timeout=60), "2 workers on PJRT_DEVICE=CPU")


def test_in_an_image_without_torch_xla_an_aws_era_job_is_refused_naming_the_xla_image(make_job, tmp_path):
    """The inductor image (torch_xla not importable here): an sm_dist job is XLA code, so it gets the installed-compiler
    refusal before anything runs, not an ImportError in its script."""
    job = aws_era_job(make_job, training_script=TRAIN_SCRIPT)
    result = run_train(job, timeout=120, PYTHONPATH=no_torch_xla(tmp_path / "blocker"),
                       OPENTC_XLA_IMAGE_TAG="2.7.0-xla-gpu-py311-cu126-debian12-sagemaker-v0.1.0")
    assert_refused(job, result, 'hyperparameter sagemaker_training_compiler_backend="xla" cannot run in this image',
                   "use the xla image (tag 2.7.0-xla-gpu-py311-cu126-debian12-sagemaker-v0.1.0)")
    assert "on XLA, which its script was written for" in result.output

"""Jobs in the image, as SageMaker runs them: `docker run --network none -v <job>:/opt/ml <image> train` on a
copy of sample/job (compiler on, XLA:CPU and Inductor on CPU: no GPU here), in debug mode, with a bad
hyperparameter, and the sample job baked into the image."""

import pytest

from conftest import tree

from .conftest import IMAGE_SAMPLE, files_under, image_sample_run, run_job

pytestmark = pytest.mark.container

COMPILER_LINES = ("Found configuration for Training Compiler", "Configuring SM Training Compiler...")


def test_sample_job_trains_with_the_compiler(image, run_once):
    job, result = image_sample_run(run_once, image, compiler=True)     # shared with opentc-compare's test
    assert result.returncode == 0, result.output[-5000:]
    for line in (*COMPILER_LINES, "PJRT_DEVICE=CPU", "Reporting training SUCCESS"):
        assert line in result.output
    assert job.succeeded and job.failure is None
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files_under(job.model))
    metrics = job.read_json("output/data/metrics.json")
    assert metrics["device"].startswith("xla") and metrics["torch_xla_imported"] is True
    assert len(metrics["losses"]) >= 2 and metrics["losses"][-1]["loss"] < metrics["losses"][0]["loss"]


def test_the_inductor_backend_compiles_in_the_image(image, make_job, containers):
    """Inductor on CPU compiles C++ with g++ and Python.h: the image has both, and the cache lands in checkpoints/.
    The model is the smallest that compiles a forward and a backward graph (tests/scripts/compile/inductor_loop.py):
    what is checked is the image's toolchain; the backend's work on models is tests/test_inductor.py's."""
    job = make_job(script="compile/inductor_loop.py", sagemaker_training_compiler_backend="inductor")
    result = run_job(image, containers(), job)
    assert result.returncode == 0, result.output[-5000:]
    assert "torch.compile (TorchInductor) ready on cpu" in result.output
    assert job.read_json("output/data/loop_metrics.json")["torch_xla_imported"] is False
    report = job.read_json("output/data/compiler/compile-report-rank0.json")
    assert report["backend"] == "inductor" and report["graphs_compiled"] >= 2, report
    assert any(name.startswith("inductor-torch-") for name in files_under(job.checkpoints / "compile-cache")), \
        files_under(job.checkpoints)


def test_debug_mode_leaves_compiler_artefacts_in_output_data(image, make_job, containers):
    job = make_job()
    job.set_hyperparameters(sagemaker_training_compiler_debug_mode=True, max_steps=3, log_every=1)
    result = run_job(image, containers(), job)
    assert result.returncode == 0, result.output[-5000:]
    assert "Training Compiler set to debug mode" in result.output
    artefacts = files_under(job.compiler_output)
    assert "XLA_METRICS_FILE.txt" in artefacts, artefacts
    assert any(name.startswith("XLA_SAVE_TENSORS_FILE.hlo") for name in artefacts), artefacts  # + ordinal
    assert any(name.startswith("xla_dump/") for name in artefacts), artefacts
    assert "CompileTime" in (job.compiler_output / "XLA_METRICS_FILE.txt").read_text()


def test_train_dry_run_in_the_image_prints_the_plan_and_writes_nothing(each_image, make_job, containers, request):
    """`docker run -v <job>:/opt/ml <image> train --dry-run`: the plan the image's own `train` would run (the sample
    job, compiler on with no backend named: each image's own compiler), and the job folder left as it was."""
    job = make_job()
    before = tree(job.root)
    result = run_job(each_image, containers(), job, command=("train", "--dry-run"))
    assert result.returncode == 0, result.output[-3000:]
    compiler = request.node.callspec.params["each_image"]   # the flavour: its own compiler
    assert "opentc-train --dry-run: the job in /opt/ml (nothing was run, installed or written)" in result.output
    assert f"device: cpu, backend: {compiler}" in result.output, result.output[-3000:]
    assert "/opt/ml/code/train.py" in result.output.split("command (in /opt/ml/code):", 1)[1], result.output[-3000:]
    assert tree(job.root) == before


def test_a_bad_hyperparameter_fails_with_the_reason(image, make_job, containers):
    job = make_job()
    job.write_hyperparameters({**job.hyperparameters(), "sagemaker_training_compiler_enabled": '"maybe"'})
    result = run_job(image, containers(), job)
    assert result.returncode == 2, result.output[-3000:]
    assert job.failure.startswith("Training not started: hyperparameter sagemaker_training_compiler_enabled "
                                  "has the value \"maybe\", which is not accepted")
    assert not job.succeeded and files_under(job.model) == []


def test_the_sample_job_in_the_image_runs_as_its_help_says(image, containers):
    result = run_job(image, containers(), command=("opentc-train", "/opt/opentc/sample-job"))
    assert result.returncode == 0, result.output[-5000:]
    assert COMPILER_LINES[0] in result.output and "Reporting training SUCCESS" in result.output


def test_no_command_with_a_job_mounted_runs_train(image, make_job, containers):
    """A launcher that starts the image without a command (the SageMaker SDK v3's ModelTrainer with the code
    in a channel) gets the job run, not the help and an exit 0 with an empty model. (With the compiler off: what
    starts is the question here; the compiled sample's tests are above.)"""
    job = make_job(sagemaker_training_compiler_enabled=False)
    job.set_hyperparameters(max_steps=3, log_every=1)
    result = run_job(image, containers(), job, command=())
    assert result.returncode == 0, result.output[-5000:]
    assert "no command given and a job is mounted at /opt/ml: running train" in result.output
    assert job.succeeded and "model.safetensors" in files_under(job.model)


def test_train_with_no_job_mounted_fails_and_says_why(image, containers):
    result = run_job(image, containers(), command=("train",))
    assert result.returncode == 2, result.output[-3000:]
    assert "Reporting training FAILURE" in result.output
    assert "job file missing: input/config/hyperparameters.json" in result.output


def test_a_read_only_output_folder_still_fails_loudly(image, make_job, containers):
    """output/ mounted read-only: the job is refused before the script (nothing it measured could be kept), and
    the verdict that cannot be written is told on stderr, with the exit code."""
    job = make_job(script="crash.py", sagemaker_training_compiler_enabled=False)
    (job.output / "data").mkdir(parents=True)
    result = run_job(image, containers(), job, "-v", f"{job.output}:/opt/ml/output:ro")
    assert result.returncode == 2, result.output[-3000:]
    assert "could not write /opt/ml/output/failure" in result.output and "Read-only file system" in result.output
    assert "nothing can be written in /opt/ml/output/data" in result.output
    assert "ValueError: batch 7" not in result.output            # the script never ran
    assert not (job.output / "failure").exists()


def test_opentc_compare_runs_in_the_image_on_jobs_it_ran(each_image, run_once, containers, tmp_path):
    """Two jobs in the image (compiler off and on: its default compiler), then its own opentc-compare on them. The
    jobs are the sample's that the image's other tests read too (image_sample_run)."""
    jobs = []
    for compiler in (False, True):
        job, run = image_sample_run(run_once, each_image, compiler)
        assert run.returncode == 0, run.output[-3000:]
        jobs.append(job)
    mounts = ("-v", f"{jobs[0].root}:/jobs/eager", "-v", f"{jobs[1].root}:/jobs/compiled", "-v", f"{tmp_path}:/out")
    result = run_job(each_image, containers(), None, *mounts,
                     command=("opentc-compare", "/jobs/eager", "/jobs/compiled", "--plot", "/out/compare.png"))
    assert result.returncode == 0, result.output[-3000:]
    steps = IMAGE_SAMPLE["max_steps"]
    assert f"| optimizer steps | {steps} | {steps} |" in result.output
    assert "speed vs first (median step) | 1.00x |" in result.output
    assert (tmp_path / "compare.png").stat().st_size > 10_000

"""Did the compiler pay? Every job's measured summary (output/data/job-summary.json), and `opentc-compare` putting
jobs side by side as a table and a picture, from job folders, output.tar.gz files and s3:// URIs.

Real jobs through `train` (the sample, eager and on XLA:CPU, and a Trainer job); S3 is a moto server, the one
thing that cannot exist here."""

import os
import subprocess
import sys
import tarfile

import pytest

from conftest import BIN, REPO, SAMPLE_EAGER_WARMUP, SAMPLE_STEPS, clean_env, free_port, run_train, sample_run
from opentc_launcher import exit_codes

pytestmark = [pytest.mark.slow, pytest.mark.xla, pytest.mark.inductor]

STEPS, LOG_EVERY = 12, 4   # the Trainer job's


@pytest.fixture(scope="module")
def sample_runs(run_once):
    """The sample job, compiler off and on (XLA:CPU), as the other tests that read it share it (conftest.sample_run):
    {name: (job folder, train's output)}."""
    runs = {"eager": sample_run(run_once, compiler=False), "xla": sample_run(run_once, compiler=True)}
    for _, result in runs.values():
        assert result.returncode == 0, result.output[-4000:]
    return {name: (job, result.output) for name, (job, result) in runs.items()}


def summary_of(job):
    return job.read_json("output/data/job-summary.json")


@pytest.mark.parametrize("name", ["eager", "xla"])
def test_every_job_has_a_summary_with_plausible_figures(sample_runs, name):
    job, output = sample_runs[name]
    summary = summary_of(job)
    assert summary["format"] == "opentc-job-summary/1" and summary["backend"] == name
    assert summary["device"] == "cpu" and summary["workers"] == 1 and summary["hosts"] == ["algo-1"]
    assert summary["outcome"] == {"exit_code": 0, "succeeded": True, "stopped": False, "headline": None,
                                  "kind": "succeeded", "rank": None, "host": None}
    assert summary["optimizer_steps"] == SAMPLE_STEPS                     # the steps the script made
    steps = summary["step_seconds"]
    warmup = SAMPLE_EAGER_WARMUP if name == "eager" else 5                # eager's set, XLA's the default
    assert steps["warmup_steps"] == warmup and steps["measured_steps"] == SAMPLE_STEPS - warmup, steps
    assert 0 < steps["median"] <= steps["p90"] < 60, steps
    assert 0 < summary["first_step_seconds"] < summary["wall_seconds"], summary
    logged = job.read_json("output/data/metrics.json")["losses"]          # what the script itself recorded
    assert summary["loss"]["source"] == "the script's own loss lines"
    assert [(p["step"], round(p["loss"], 4)) for p in summary["loss"]["points"]] == [
        (p["step"], round(p["loss"], 4)) for p in logged]
    assert summary["peak_memory_mb"] > 100 and summary["processes"][0]["peak_memory_kind"]
    assert summary["throughput"]["source"] is None       # the sample slices a tensor: no DataLoader, no guess
    assert summary["versions"]["torch"].startswith("2.") and summary["versions"]["transformers"]
    machine = summary["machine"]                                           # the host's record (issue 41)
    assert machine["cpus"] == len(os.sched_getaffinity(0)) and machine["gpus"] == 0 and machine["bf16"] is None
    if name == "xla":
        assert summary["compile"]["seconds"] > 0 and summary["compile"]["graphs_compiled"] >= 1
    else:
        assert summary["compile"] is None
    # The model the worker saw trained (for MFU): the sample's GPT-2, 2 layers, 64 wide, its embeddings tied.
    model = summary["processes"][0]["model"]
    assert (model["name"], model["seen_by"], model["layers"], model["width"]) == (
        "GPT2LMHeadModel", "a transformers model", 2, 64), model
    assert summary["utilisation"] == {"mfu": None, "why_not": "MFU is a GPU figure: this job ran on cpu"}
    # The headline is the log's line before the verdict.
    lines = output.rstrip().splitlines()
    assert "job summary: " in lines[-2] and lines[-1].endswith("Reporting training SUCCESS"), lines[-3:]
    assert f"{name} on cpu, 1 worker(s); {SAMPLE_STEPS} optimizer steps; median step " in lines[-2]


def test_a_trainer_jobs_throughput_comes_from_its_batches_and_its_own_log(make_job):
    job = make_job(script="run_clm_tiny.py")
    job.set_hyperparameters(sagemaker_training_compiler_enabled=False, output_dir=str(job.model), max_steps=STEPS,
                            per_device_train_batch_size=4, logging_steps=LOG_EVERY, save_strategy="no",
                            report_to="none", dataloader_drop_last=True, block_size=64, seed=0,
                            disable_tqdm=True, bf16=True, use_cpu=True)
    result = run_train(job)
    assert result.returncode == 0, result.output[-4000:]
    summary = summary_of(job)
    # The model it trains, as Accelerate prepared it, and the dtype its matrix multiplies ran in: bf16 by Accelerate's
    # mixed precision (the weights stay float32). 6N's weights: the vocabulary's embeddings (tied to the output
    # layer) and 2 layers of 49,984 weights and the final norm's 128; the 64 x 64 position table left out.
    model = summary["processes"][0]["model"]
    assert (model["name"], model["seen_by"], model["layers"], model["width"], model["matmul_dtype"]) == (
        "GPT2LMHeadModel", "Accelerate's prepare_model", 2, 64, "bf16"), model
    vocabulary, rest = divmod(model["weights"] - 2 * 49_984 - 128, 64)
    assert rest == 0 and 256 < vocabulary <= 401, model
    assert summary["utilisation"]["why_not"] == "MFU is a GPU figure: this job ran on cpu"
    throughput = summary["throughput"]
    assert throughput["source"] == "batch shapes, steady state", throughput
    assert throughput["source_code"] == "batches"        # what a program reads (issue 41); the words may change
    assert throughput["samples_per_second"] > 0
    assert throughput["tokens_per_second"] == pytest.approx(64 * throughput["samples_per_second"])   # 64-token blocks
    assert throughput["trainer_samples_per_second"] > 0                   # the Trainer's figure, kept beside
    assert summary["loss"]["source"] == "the Trainer's log"
    assert len(summary["loss"]["points"]) == STEPS // LOG_EVERY
    trained = job.read_json("output/data/trainer_metrics.json")["losses"]
    # transformers 5 prints each value to 4 significant digits ('5.904'): the summary has what it printed.
    assert [p["loss"] for p in summary["loss"]["points"]] == pytest.approx(trained, rel=1e-3)
    assert summary["optimizer_steps"] == STEPS


def test_a_script_that_trains_in_a_child_after_a_step_of_its_own_has_its_steps_unknown(make_job):
    """Issue 51 (7): one optimizer step in the script's own process (a check before it launches its own training) hid
    the 300 and more its child ran: "1 worker(s); 1 optimizer steps". The child used more CPU than the worker, and its
    loss lines came after the worker's last step: where the work ran decides, not a count of zero."""
    job = make_job(script="self_launching.py", sagemaker_training_compiler_enabled=False)
    result = run_train(job)
    assert result.returncode == exit_codes.OK, result.output[-4000:]
    summary = summary_of(job)
    assert summary["workers"] is None and summary["optimizer_steps"] is None, summary
    assert summary["findings"][0].startswith("the script started processes of its own that did the work ("), summary
    assert "while the launcher's worker counted 1 optimizer step(s) of its own" in summary["findings"][0], summary
    assert len(summary["loss"]["points"]) > 300                     # what they printed is kept
    assert "workers unknown; optimizer steps unknown" in result.output


def test_a_failed_job_still_has_a_summary_of_what_was_known(make_job):
    job = make_job(script="crash.py", sagemaker_training_compiler_enabled=False)
    result = run_train(job)
    assert result.returncode == exit_codes.FAILED
    summary = summary_of(job)
    assert summary["outcome"]["succeeded"] is False and summary["outcome"]["exit_code"] == exit_codes.FAILED
    assert summary["outcome"]["headline"].startswith("Training failed: the training script ended with exit code 1")
    # a code with the facts, not prose to match (issue 41)
    assert (summary["outcome"]["kind"], summary["outcome"]["rank"], summary["outcome"]["host"]) == (
        "script_failed", 0, "algo-1")
    assert summary["optimizer_steps"] == 0 and summary["backend"] == "eager" and summary["processes"]
    bad = make_job()
    (bad.config / "hyperparameters.json").write_text("[]")
    assert run_train(bad).returncode == exit_codes.BAD_INPUT
    summary = summary_of(bad)                                   # not even started: the outcome, and nothing more
    assert summary["outcome"]["headline"].startswith("Training not started:") and summary["backend"] is None
    assert summary["outcome"]["kind"] == "not_started"


def compare(*args, **env):
    return subprocess.run([str(BIN / "opentc-compare"), *map(str, args)], env=clean_env(**env),
                          capture_output=True, text=True, timeout=300)


def output_tarball(job, path):
    """What SageMaker puts in S3 as output.tar.gz: the contents of /opt/ml/output/data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for item in sorted((job.output / "data").iterdir()):
            tar.add(item, arcname=item.name)
    return path


def assert_compared(text, first="eager", second="xla"):
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows[""].startswith(f"| | {first} (") and f" | {second} (" in rows[""], text
    assert rows["optimizer steps"] == f"| optimizer steps | {SAMPLE_STEPS} | {SAMPLE_STEPS} |", text
    ratio = rows["speed vs first (median step)"].split(" | ")
    assert ratio[1] == "1.00x" and ratio[2].rstrip(" |").endswith("x") and ratio[2] != "-", text
    assert "peak memory vs first" in rows and "final loss" in rows


def test_compare_two_job_folders_and_draw_them(sample_runs, tmp_path):
    plot = tmp_path / "compare.png"
    result = compare(sample_runs["eager"][0].root, sample_runs["xla"][0].root, "--plot", plot)
    assert result.returncode == 0, result.stderr
    assert_compared(result.stdout)
    from PIL import Image

    with Image.open(plot) as image:
        assert image.format == "PNG" and image.size == (1200, 800)


def test_compare_two_output_tarballs(sample_runs, tmp_path):
    tarballs = [output_tarball(sample_runs[name][0], tmp_path / name / "output" / "output.tar.gz")
                for name in ("eager", "xla")]
    result = compare(*tarballs)
    assert result.returncode == 0, result.stderr
    assert_compared(result.stdout)


def test_compare_s3_uris_against_a_moto_server(sample_runs, tmp_path):
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        endpoint = f"http://127.0.0.1:{port}"
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
        s3.create_bucket(Bucket="jobs")
        uris = []
        for name in ("eager", "xla"):
            local = output_tarball(sample_runs[name][0], tmp_path / f"{name}.tar.gz")
            s3.upload_file(str(local), "jobs", f"gpt2-{name}/output/output.tar.gz")
            uris.append(f"s3://jobs/gpt2-{name}/output/output.tar.gz")
        result = compare(*uris, AWS_ENDPOINT_URL=endpoint, **creds)
        assert result.returncode == 0, result.stderr
        assert_compared(result.stdout)
        missing = compare("s3://jobs/nothing/output/output.tar.gz", AWS_ENDPOINT_URL=endpoint, **creds)
        assert missing.returncode == 2 and "s3://jobs/nothing/output/output.tar.gz could not be downloaded" in \
            missing.stderr
    finally:
        server.stop()


def test_compare_names_what_it_cannot_read(tmp_path):
    result = compare(tmp_path / "nowhere")
    assert result.returncode == 2 and f"{tmp_path / 'nowhere'} does not exist" in result.stderr
    (tmp_path / "job" / "output" / "data").mkdir(parents=True)
    result = compare(tmp_path / "job")
    assert result.returncode == 2 and "holds no job-summary.json" in result.stderr
    (tmp_path / "job" / "output" / "data" / "job-summary.json").write_text('{"format": "something else"}')
    result = compare(tmp_path / "job")
    assert result.returncode == 2 and "is not a job summary of format opentc-job-summary/1" in result.stderr


def test_compare_installs_and_runs_without_torch(sample_runs, tmp_path):
    """Where people read results: a fresh venv with opentc-compare and what it needs (matplotlib), no torch."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c",
                          str(REPO / "constraints.txt"), str(REPO / "compare")], capture_output=True, text=True,
                         timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list"], capture_output=True, text=True)
    assert "torch" not in listed.stdout.lower() and "sagemaker" not in listed.stdout.lower(), listed.stdout
    result = subprocess.run([str(venv / "bin" / "opentc-compare"), str(sample_runs["eager"][0].root),
                             str(sample_runs["xla"][0].root), "--plot", str(tmp_path / "c.png")],
                            env={**os.environ, "PATH": str(venv / "bin")}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert_compared(result.stdout)
    assert (tmp_path / "c.png").stat().st_size > 10_000


def test_the_summary_keeps_each_kind_of_compile_finding_once_with_the_lowest_rank_that_found_it():
    from opentc_toolkit.job_summary import findings

    records = [  # by rank, as the summary reads them
        {"process": "rank0", "findings": ["idle optimizer AdamW"],
         "compile_findings": [{"kind": "host_reads", "text": "read back in 11 of 11 steps. To fix: x."},
                              {"kind": "graph_breaks", "text": "2 graph break(s). To fix: y."}]},
        {"process": "rank1", "findings": ["idle optimizer AdamW"],
         "compile_findings": [{"kind": "host_reads", "text": "read back in 10 of 11 steps. To fix: x."},
                              {"kind": "cpu_fallback", "text": "CPU fallback ops: aten::histc x12. To fix: z."}]},
        {"process": "rank2"},   # a worker that found nothing (or an older record)
    ]
    assert findings(records) == [
        "idle optimizer AdamW",
        "compile report of rank0: read back in 11 of 11 steps. To fix: x.",
        "compile report of rank0: 2 graph break(s). To fix: y.",
        "compile report of rank1: CPU fallback ops: aten::histc x12. To fix: z.",
    ]


def test_worker_records_are_read_by_rank_and_one_that_is_not_a_record_is_left_out(tmp_path, caplog):
    from opentc_launcher.worker_record import read_records

    (tmp_path / "worker-rank1.json").write_text('{"process": "rank1", "rank": 1}')
    (tmp_path / "worker-rank10.json").write_text('{"process": "rank10", "rank": 10}')
    (tmp_path / "worker-rank0-spawned1.json").write_text('{"process": "rank0-spawned1", "rank": 0}')
    (tmp_path / "worker-rank2.json").write_text('["not", "a", "record"]')
    (tmp_path / "worker-rank3.json").write_text('{"process": "rank3", "ra')   # cut short by a stop
    assert [r["process"] for r in read_records(str(tmp_path))] == ["rank0-spawned1", "rank1", "rank10"]
    assert "worker-rank2.json is not a worker's record" in caplog.text
    assert "worker-rank3.json could not be read" in caplog.text


def test_a_step_that_compiled_after_warm_up_is_left_out_of_the_step_times_and_said(make_job):
    """A Trainer job on Inductor whose last batch is smaller (dataloader_drop_last off): the new shape compiles at
    the last step, long after warm-up. The summary's step times leave that step out and say so, and the compile
    report's finding names it (issue 38: a median that measured compilation, and a report that said "clean")."""
    job = make_job(script="run_clm_tiny.py", sagemaker_training_compiler_enabled=True,
                   sagemaker_training_compiler_backend="inductor", sagemaker_training_compiler_warmup_steps=3)
    # The sample's text eight times over: 112 blocks of 64 tokens, in batches of 10: 11 full batches, then one of 2.
    notes = job.root / "input" / "data" / "train" / "notes.txt"
    notes.write_text(notes.read_text() * 8)
    job.set_hyperparameters(output_dir=str(job.model), num_train_epochs=1, per_device_train_batch_size=10,
                            block_size=64, logging_steps=4, save_strategy="no", report_to="none", seed=0,
                            dataloader_drop_last=False, disable_tqdm=True)
    result = run_train(job)
    assert result.returncode == 0, result.output[-4000:]
    summary = summary_of(job)
    steps = summary["step_seconds"]
    assert summary["optimizer_steps"] == 12 and steps["compiling_left_out"] == 1, steps
    assert steps["measured_steps"] == 12 - 3 - 1, steps
    assert "1 step(s) that compiled left out" in result.output
    late = [f for f in summary["findings"] if "compiled new graphs" in f]
    assert late and late[0].startswith("compile report of rank0: 1 step(s) after warm-up (step 3) compiled new graphs")
    assert any(f["kind"] == "late_compilation" for f in job.compile_report(0)["findings"])

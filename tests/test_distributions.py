"""The distributions the SageMaker SDKs ask for (toolkit distributions.py): honoured through the launcher, or refused
before anything runs; never ignored. Real `train` jobs on real job folders; the SDK's hyperparameters are those
sagemaker 2.x's `PyTorch(distribution=...).hyperparameters()` sends (checked against sagemaker 2.257)."""

import json
import subprocess
import sys

import pytest

from conftest import SCRIPTS, run_train
from opentc_launcher.setting_names import ONE_WORKER_PER_HOST, setting
from opentc_toolkit.distributions import (
    INSTEAD,
    PYTORCH_DDP,
    REFUSED,
    SMDDP,
    SMDDP_MPI_OPTIONS,
    TORCH_DISTRIBUTED,
    XLA_MULTI_WORKER,
    Distribution,
    read_distribution,
)
from opentc_toolkit.job import decode_hyperparameters
from opentc_toolkit.job_settings import JobSettings
from opentc_toolkit.not_started import BadInput
from opentc_toolkit.plan import with_setting_names

# What sagemaker 2.257's PyTorch(distribution=...) sends (decoded; the tests encode them as the SDK does).
SENT = {
    "torch_distributed": {TORCH_DISTRIBUTED: True, "sagemaker_instance_type": "ml.g5.12xlarge"},
    # PyTorch(distribution={"pytorchddp": ...}), which the SDK rewrites to smdistributed's dataparallel, and
    # {"smdistributed": {"dataparallel": {"enabled": True}}}: the same keys
    "pytorchddp": {SMDDP: True, "sagemaker_instance_type": "local", SMDDP_MPI_OPTIONS: ""},
    # HuggingFace(distribution={"pytorchddp": ...})
    "hf_pytorchddp": {PYTORCH_DDP: True, "sagemaker_instance_type": "local"},
    "mpi": {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2,
            "sagemaker_mpi_custom_mpi_options": ""},
    "parameter_server": {"sagemaker_parameter_server_enabled": True},
}
BACKENDS = {   # every backend: the compiler off, Inductor, and XLA (XLA:CPU has no collectives across processes)
    "eager": {"sagemaker_training_compiler_enabled": False},
    "inductor": {"sagemaker_training_compiler_backend": "inductor"},
    "xla": {"sagemaker_training_compiler_backend": "xla",
            "sagemaker_training_compiler_cpu_multi_worker": "unsynchronized"},
}


def one_worker(settings):
    """How the launcher's messages, started by the toolkit for this job, say to run one worker."""
    return setting(ONE_WORKER_PER_HOST, with_setting_names({}, settings))


def test_torch_distributed_and_pytorchxla_ask_for_several_workers():
    torch_distributed = JobSettings.from_hyperparameters(SENT["torch_distributed"])
    assert torch_distributed.multi_worker and torch_distributed.multi_worker_asked_by == (TORCH_DISTRIBUTED,)
    assert torch_distributed.distribution is Distribution.DATA_PARALLEL
    assert one_worker(torch_distributed) == f"{TORCH_DISTRIBUTED}=false"
    xla = JobSettings.from_hyperparameters(decode_hyperparameters({XLA_MULTI_WORKER: "true"}))
    assert xla.multi_worker and xla.multi_worker_asked_by == (XLA_MULTI_WORKER,)
    assert xla.distribution is Distribution.XLA_MULTI_WORKER
    both = JobSettings.from_hyperparameters({XLA_MULTI_WORKER: True, TORCH_DISTRIBUTED: True})
    assert one_worker(both) == f"{XLA_MULTI_WORKER}=false and {TORCH_DISTRIBUTED}=false"
    off = JobSettings.from_hyperparameters(decode_hyperparameters({TORCH_DISTRIBUTED: "false"}))
    assert not off.multi_worker and off.distribution is Distribution.NONE
    with pytest.raises(BadInput, match=f"hyperparameter {TORCH_DISTRIBUTED} has the value \"yes please\""):
        read_distribution({TORCH_DISTRIBUTED: "yes please"}, {})


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_every_other_distribution_key_is_refused_when_it_asks_for_something(key):
    with pytest.raises(BadInput) as raised:
        read_distribution({key: True if key.endswith("_enabled") else "x"}, {})
    assert str(raised.value).startswith(f"hyperparameter {key}=")
    instead = REFUSED[key][1]
    assert (f"Use {INSTEAD}." if instead is INSTEAD else f"{instead}.") in str(raised.value)
    # switched off, or empty as the SDK sends the options beside a distribution that is off: nothing asked
    assert read_distribution({key: False if key.endswith("_enabled") else ""}, {}).distribution is Distribution.NONE


def test_model_parallel_is_refused_only_as_the_sdk_sends_it():
    with pytest.raises(BadInput, match="SageMaker model parallelism library"):
        read_distribution({"sagemaker_distributed_dataparallel_enabled": False, TORCH_DISTRIBUTED: True},
                          {"mp_parameters": {"tensor_parallel_degree": 2}})
    # a script's own argument of that name, with no smdistributed distribution, is the script's
    assert read_distribution({}, {"mp_parameters": "mine"}).distribution is Distribution.NONE


@pytest.mark.slow
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_an_sdk_v2_torch_distributed_job_runs_a_worker_per_gpu(make_job, backend):
    """No GPU here: OPENTC_WORKERS_PER_HOST stands in for the count, as on a CPU instance."""
    job = make_job(script="report_env.py", **SENT["torch_distributed"], **BACKENDS[backend], tag="x y")
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-3000:]
    assert "launching 2 worker(s) on this host (node 0 of 1, rendezvous on 127.0.0.1; asked by " \
           f"{TORCH_DISTRIBUTED})" in result.output
    reports = [json.loads((job.model / f"env-rank{rank}.json").read_text()) for rank in range(2)]
    assert [(r["RANK"], r["WORLD_SIZE"]) for r in reports] == [("0", "2"), ("1", "2")]
    assert all(r["argv"] == ["--tag", "x y"] and r["all_reduce_sum"] == 3.0 for r in reports)


@pytest.mark.parametrize(("distribution", "key"), [("pytorchddp", SMDDP), ("hf_pytorchddp", PYTORCH_DDP)])
def test_the_notebooks_data_parallel_baselines_run_as_pytorch_ddp(distribution, key):
    """AWS's notebooks' native baselines: pytorchddp (as the PyTorch and the HuggingFace estimators send it) and
    smdistributed's dataparallel ask for several workers, run as PyTorch DDP, and the log says so."""
    settings = JobSettings.from_hyperparameters(SENT[distribution])
    assert settings.multi_worker and settings.multi_worker_asked_by == (key,)
    assert one_worker(settings) == f"{key}=false"
    [note] = settings.distribution_notes
    assert note.startswith(f"{key}=true asks for ") and "smdistributed library is not in this image, so the job " \
        "runs as PyTorch DDP" in note and "(NCCL on GPUs, gloo on CPUs)" in note and 'backend=\"nccl\"' in note
    with pytest.raises(BadInput, match=f"hyperparameter {SMDDP_MPI_OPTIONS}=\"-x NCCL_DEBUG=INFO\" asks for custom "
                                       f"MPI options .* without MPI"):
        read_distribution({**SENT[distribution], SMDDP_MPI_OPTIONS: "-x NCCL_DEBUG=INFO"}, {})


@pytest.mark.slow
def test_a_data_parallel_baseline_trains_on_a_worker_per_gpu_and_says_how(make_job):
    """No GPU here: OPENTC_WORKERS_PER_HOST stands in for the count, as on a CPU instance; two workers meet in
    torch.distributed (gloo) and all-reduce."""
    job = make_job(script="report_env.py", **SENT["pytorchddp"], **BACKENDS["eager"])
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-3000:]
    assert f"launching 2 worker(s) on this host (node 0 of 1, rendezvous on 127.0.0.1; asked by {SMDDP})" \
        in result.output
    assert f"{SMDDP}=true asks for " in result.output and "runs as PyTorch DDP" in result.output
    reports = [json.loads((job.model / f"env-rank{rank}.json").read_text()) for rank in range(2)]
    assert [(r["RANK"], r["WORLD_SIZE"]) for r in reports] == [("0", "2"), ("1", "2")]
    assert all(r["all_reduce_sum"] == 3.0 for r in reports)


def test_a_script_that_imports_smdistributed_fails_saying_what_to_use_instead(make_job):
    job = make_job(script="smddp_script.py", **SENT["pytorchddp"], **BACKENDS["eager"])
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 1, result.output[-3000:]
    reason = job.failure.split("\n")[1]
    assert reason.startswith("the script imports smdistributed, SageMaker's distributed training libraries"), reason
    assert job.failure.startswith("Training failed: the training script ended with exit code 1 on rank "), job.failure
    assert 'Use torch.distributed with backend="nccl"' in reason, reason
    assert "ModuleNotFoundError: No module named 'smdistributed'" in job.failure


@pytest.mark.parametrize("distribution", ["mpi", "parameter_server"])
def test_an_sdk_v2_job_asking_for_another_distribution_fails_before_the_script(make_job, distribution):
    job = make_job(script="report_env.py", **SENT[distribution])
    result = run_train(job)
    assert result.returncode == 2, result.output[-3000:]
    assert job.failure.startswith("Training not started: hyperparameter "), job.failure
    assert "torch_distributed" in job.failure and not list(job.model.glob("env-rank*.json"))


def test_a_refusal_names_the_key_that_asked_for_the_workers(make_job):
    """Several XLA:CPU workers are refused (no collectives); the way to one worker is the key the job used."""
    job = make_job(script="report_env.py", **SENT["torch_distributed"], sagemaker_training_compiler_backend="xla")
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 2, result.output[-3000:]
    assert f"one worker ({TORCH_DISTRIBUTED}=false)" in job.failure, job.failure


@pytest.mark.slow
@pytest.mark.inductor
def test_a_plain_fsdp2_script_trains_sharded_and_compiled_with_one_process_losses(make_job, tmp_path):
    """Issue 25's plain-script case on one host: the script calls fully_shard and torch.compile itself; two workers
    over gloo, asked for as the SDK v2 asks, on the Inductor backend. The parameters are DTensors (sharded, not
    silently replicated), and the loss curve is one eager process's on the whole batch, within float rounding of
    a different reduction order (1e-3 relative)."""
    expected = one_eager_process(tmp_path)
    job = make_job(script="fsdp2_compile.py", **SENT["torch_distributed"], **BACKENDS["inductor"])
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-3000:]
    trained = json.loads((job.model / "losses.json").read_text())
    assert trained["world"] == 2 and trained["sharded"] is True, trained
    assert trained["losses"] == pytest.approx(expected, rel=1e-3), (trained["losses"], expected)
    assert job.compile_report(0)["graphs_compiled"] > 0


def one_eager_process(tmp_path) -> list[float]:
    """The reference curve: fsdp2_compile.py in one plain process, eager, on the whole batch, never stopped."""
    single = subprocess.run([sys.executable, str(SCRIPTS / "fsdp2_compile.py"), "--compile", "no",
                             "--out", str(tmp_path / "single")], capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]
    return json.loads((tmp_path / "single" / "losses.json").read_text())["losses"]


def test_fsdp_through_accelerate_is_refused_only_on_cpus():
    from opentc_toolkit.sharding import check_sharding

    for params, env in (({"fsdp": "full_shard auto_wrap"}, {}), ({}, {"ACCELERATE_USE_FSDP": "true"})):
        with pytest.raises(BadInput, match="accelerate shards only on GPUs") as raised:
            check_sharding(params, env, "cpu")
        assert "fully_shard" in str(raised.value)
        check_sharding(params, env, "cuda")   # a GPU: honoured as the user set it
    for params, env in (({"fsdp": ""}, {}), ({"fsdp": False}, {}), ({"fsdp_config": "x.json"}, {}),
                        ({}, {"ACCELERATE_USE_FSDP": "false"})):
        check_sharding(params, env, "cpu")   # asks for nothing


@pytest.mark.parametrize("how", ["trainer", "accelerate"])
def test_a_cpu_job_asking_the_trainer_or_accelerate_for_fsdp_fails_before_the_script(make_job, how):
    """On CPUs the Trainer's --fsdp and accelerate's ACCELERATE_USE_FSDP would silently train unsharded (the probe
    below shows why): refused before any worker starts, naming what asked and the way that does shard."""
    fsdp = {"fsdp": "full_shard auto_wrap"} if how == "trainer" else {}
    job = make_job(script="report_env.py", **SENT["torch_distributed"], **BACKENDS["inductor"], **fsdp)
    env = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"} if how == "accelerate" else {}
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2", **env)
    assert result.returncode == 2, result.output[-3000:]
    named = 'hyperparameter fsdp="full_shard auto_wrap"' if how == "trainer" else \
        "the environment variable ACCELERATE_USE_FSDP=true"
    assert job.failure.startswith(f"Training not started: {named} asks for FSDP sharding"), job.failure
    assert "torch.distributed.fsdp.fully_shard" in job.failure and not list(job.model.glob("env-rank*.json"))


@pytest.mark.slow
def test_accelerate_still_runs_ddp_when_asked_for_fsdp_on_cpus(tmp_path):
    """The fact the refusal above rests on, checked on the installed accelerate and torch (two real processes over
    gloo, with the variables the image's workers get on CPUs): asked for FSDP2 on CPUs, accelerate wraps the model
    in DDP and its parameters stay plain Parameters. If a later accelerate shards on CPUs, this fails: the refusal
    (toolkit sharding.py) should then be lifted."""
    from conftest import clean_env, free_port

    env = clean_env(ACCELERATE_USE_FSDP="true", FSDP_VERSION="2", USE_TORCH_XLA="0", ACCELERATE_USE_CPU="true",
                    OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-port", str(free_port()), str(SCRIPTS / "accelerate_fsdp_probe.py")],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probes = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert sorted(p["rank"] for p in probes) == [0, 1], proc.stdout
    assert all(p["distributed_type"] == "DistributedType.MULTI_CPU" and p["wrapped_as"] == "DistributedDataParallel"
               and p["parameter_types"] == ["Parameter"] for p in probes), probes


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_an_accelerate_script_on_several_cpu_workers_is_one_data_parallel_job(make_job, backend):
    """Without being told the CPU is its device, accelerate under torchrun on a host with no GPU sets up no process
    group (DistributedType.NO): every worker would train its own replica, never synchronised. The workers of a
    CPU job get ACCELERATE_USE_CPU, and Accelerator() makes them one DDP job (MULTI_CPU) over gloo."""
    job = make_job(script="accelerate_fsdp_probe.py", **SENT["torch_distributed"], **BACKENDS[backend])
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-3000:]
    probes = [json.loads(line.split("PROBE ", 1)[1]) for line in result.output.splitlines() if "PROBE {" in line]
    assert sorted(p["rank"] for p in probes) == [0, 1], result.output[-3000:]
    assert all(p["distributed_type"] == "DistributedType.MULTI_CPU" and p["wrapped_as"] == "DistributedDataParallel"
               and p["compiled"] is (backend == "inductor") for p in probes), probes


@pytest.mark.slow
def test_an_optimizer_created_before_fully_shard_is_a_loud_finding(make_job):
    """The model-parallel guide's pitfall: AdamW made from the model's parameters before fully_shard holds
    parameters the sharded model no longer uses, so the job trains nothing. Each worker says so when its script ends,
    and the job summary carries it; the same script with the optimizer made after sharding says nothing."""
    job = make_job(script="fsdp2_compile.py", **SENT["torch_distributed"], **BACKENDS["eager"], compile="no",
                   optimizer_before_sharding="yes")
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-3000:]
    said = ("AdamW found no gradient on any of the 20 parameter(s) it holds in any of its 8 step(s): this job trained "
            "nothing with it")
    assert all(f"rank {rank}: {said}" in result.output for rank in (0, 1)), result.output[-3000:]
    losses = json.loads((job.model / "losses.json").read_text())["losses"]
    summary = job.read_json("output/data/job-summary.json")
    # The script also reads its loss back at every step (it logs every step): a finding of its own, where it is.
    every_step = f"every step at: {job.root}/code/fsdp2_compile.py:"
    assert [said in f for f in summary["findings"] if every_step not in f] == [True], summary["findings"]
    assert all(len(p["findings"]) == 2 for p in summary["processes"])

    fine = make_job(script="fsdp2_compile.py", **SENT["torch_distributed"], **BACKENDS["eager"], compile="no")
    result = run_train(fine, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0 and "found no gradient" not in result.output, result.output[-3000:]
    assert [every_step.replace(str(job.root), str(fine.root)) in f
            for f in fine.read_json("output/data/job-summary.json")["findings"]] == [True]
    trained = json.loads((fine.model / "losses.json").read_text())["losses"]
    assert trained[0] == pytest.approx(losses[0]) and trained[-1] < losses[-1]   # the same start; only this one learnt


@pytest.mark.slow
@pytest.mark.parametrize(("samples", "drop_last", "said"), [
    (11, "no", "the data set's 11 samples do not divide among the 2 ranks, so each epoch it repeats 1 of them to "
               "give every rank 6 (drop_last=False)"),
    (10, "no", None), (11, "yes", None)])
def test_a_data_set_that_does_not_divide_among_the_ranks_is_a_finding(make_job, samples, drop_last, said):
    """DistributedSampler evens the ranks out by repeating samples: a finding on every rank, in the summary too,
    when the sizes do not divide and nothing is dropped; silence otherwise."""
    job = make_job(script="uneven_sampler.py", **SENT["torch_distributed"], **BACKENDS["eager"], samples=samples,
                   drop_last=drop_last)
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-3000:]
    seen = [json.loads((job.model / f"indices-rank{rank}.json").read_text()) for rank in range(2)]
    findings = job.read_json("output/data/job-summary.json")["findings"]
    if said:
        assert sorted(seen[0] + seen[1]) == [0, 0, *range(1, samples)]   # what the finding says: sample 0 twice
        assert all(f"rank {rank}: DistributedSampler: {said}" in result.output for rank in (0, 1))
        assert len(findings) == 1 and said in findings[0], findings
    else:
        assert "DistributedSampler" not in result.output and findings == []

"""The distributions the SageMaker SDKs ask for (toolkit distributions.py): honoured through the launcher, or refused
before anything runs; never ignored. Real `train` jobs on real job folders; the SDK's hyperparameters are those
sagemaker 2.x's `PyTorch(distribution=...).hyperparameters()` sends (checked against sagemaker 2.257)."""

import json
import subprocess
import sys

import pytest

from conftest import SCRIPTS, run_train
from opentc_toolkit.compiler import CompilerSettings
from opentc_toolkit.distributions import REFUSED, TORCH_DISTRIBUTED, XLA_MULTI_WORKER, read_distribution
from opentc_toolkit.job import decode_hyperparameters
from opentc_toolkit.not_started import BadInput

# What sagemaker 2.257's PyTorch(distribution=...) sends (decoded; the tests encode them as the SDK does).
SENT = {
    "torch_distributed": {TORCH_DISTRIBUTED: True, "sagemaker_instance_type": "ml.g5.12xlarge"},
    "pytorchddp": {"sagemaker_distributed_dataparallel_enabled": True, "sagemaker_instance_type": "local",
                   "sagemaker_distributed_dataparallel_custom_mpi_options": ""},
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


def test_torch_distributed_and_pytorchxla_ask_for_several_workers():
    torch_distributed = CompilerSettings.from_hyperparameters(SENT["torch_distributed"])
    assert torch_distributed.multi_worker and torch_distributed.multi_worker_asked_by == (TORCH_DISTRIBUTED,)
    assert torch_distributed.setting_names()["--nproc-per-node 1"] == f"{TORCH_DISTRIBUTED}=false"
    xla = CompilerSettings.from_hyperparameters(decode_hyperparameters({XLA_MULTI_WORKER: "true"}))
    assert xla.multi_worker and xla.multi_worker_asked_by == (XLA_MULTI_WORKER,)
    both = CompilerSettings.from_hyperparameters({XLA_MULTI_WORKER: True, TORCH_DISTRIBUTED: True})
    assert both.setting_names()["--nproc-per-node 1"] == f"{XLA_MULTI_WORKER}=false and {TORCH_DISTRIBUTED}=false"
    assert not CompilerSettings.from_hyperparameters(decode_hyperparameters({TORCH_DISTRIBUTED: "false"})).multi_worker
    with pytest.raises(BadInput, match=f"hyperparameter {TORCH_DISTRIBUTED} has the value 'yes please'"):
        read_distribution({TORCH_DISTRIBUTED: "yes please"}, {})


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_every_other_distribution_key_is_refused_when_it_asks_for_something(key):
    with pytest.raises(BadInput) as raised:
        read_distribution({key: True if key.endswith("_enabled") else "x"}, {})
    assert str(raised.value).startswith(f"hyperparameter {key}=")
    assert 'Use distribution={"torch_distributed": {"enabled": True}}' in str(raised.value)
    # switched off, or empty as the SDK sends the options beside a distribution that is off: nothing asked
    assert read_distribution({key: False if key.endswith("_enabled") else ""}, {}).several_workers is False


def test_model_parallel_is_refused_only_as_the_sdk_sends_it():
    with pytest.raises(BadInput, match="SageMaker model parallelism library"):
        read_distribution({"sagemaker_distributed_dataparallel_enabled": False, TORCH_DISTRIBUTED: True},
                          {"mp_parameters": {"tensor_parallel_degree": 2}})
    # a script's own argument of that name, with no smdistributed distribution, is the script's
    assert read_distribution({}, {"mp_parameters": "mine"}).several_workers is False


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


@pytest.mark.parametrize("distribution", ["pytorchddp", "mpi", "parameter_server"])
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
    single = subprocess.run([sys.executable, str(SCRIPTS / "fsdp2_compile.py"), "--compile", "no",
                             "--out", str(tmp_path / "single")], capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]
    expected = json.loads((tmp_path / "single" / "losses.json").read_text())["losses"]
    job = make_job(script="fsdp2_compile.py", **SENT["torch_distributed"], **BACKENDS["inductor"])
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-3000:]
    trained = json.loads((job.model / "losses.json").read_text())
    assert trained["world"] == 2 and trained["sharded"] is True, trained
    assert trained["losses"] == pytest.approx(expected, rel=1e-3), (trained["losses"], expected)
    assert job.compile_report(0)["graphs_compiled"] > 0

"""Launch plans: argv and environment for each kind of job (pure functions; GPUs are only numbers here)."""

import os
from types import MappingProxyType

import pytest

from opentc_toolkit.compiler import CompilerSettings
from opentc_toolkit.errors import JobConfigError
from opentc_toolkit.job import JobPaths, TrainingJob
from opentc_toolkit.plan import LaunchSettings, build_plan

PY = "/usr/bin/python3"


def job(hosts=("algo-1",), current="algo-1", gpus=0, args=("--epochs", "3")):
    return TrainingJob(
        paths=JobPaths.under("/opt/ml"), entry_point="train.py", submit_directory="/opt/ml/code",
        hyperparameters=MappingProxyType({}), framework_params=MappingProxyType({}), user_args=tuple(args),
        hosts=tuple(hosts), current_host=current, num_gpus=gpus, num_cpus=8,
        channels=MappingProxyType({}), script_env=MappingProxyType({}))


def plan(j, settings, env=None, launch=None):
    return build_plan(j, settings, launch or LaunchSettings(), env or {}, "/opt/ml/code/train.py",
                      "/tmp/scratch", python=PY)


def option(argv, name):
    return argv[argv.index(name) + 1]


def test_single_worker_runs_the_bootstrap_in_one_process():
    p = plan(job(), CompilerSettings(enabled=True), env={"PJRT_DEVICE": "CPU"})
    assert p.argv[:3] == (PY, "-m", "opentc_launcher.worker")   # no console script beside this python
    assert p.argv[-3:] == ("/opt/ml/code/train.py", "--epochs", "3")
    assert option(p.argv, "--runtime") == "xla" and option(p.argv, "--xla-device") == "CPU"
    assert not p.uses_launcher and p.world_size == 1 and p.peers == ()
    assert p.env["TORCHELASTIC_ERROR_FILE"] == "/tmp/scratch/worker-error.json"
    assert p.cwd == "/opt/ml/code"
    # one worker never gets torchrun's variables: HF would think it is distributed
    assert "RANK" not in p.env and "WORLD_SIZE" not in p.env


def test_compiler_off_uses_the_torch_runtime_and_no_cache():
    p = plan(job(), CompilerSettings(enabled=False))
    assert option(p.argv, "--runtime") == "torch"
    assert option(p.argv, "--compile-cache-dir") == ""


def test_multi_worker_one_host_is_a_local_rendezvous_with_one_worker_per_gpu():
    p = plan(job(gpus=8), CompilerSettings(enabled=True, multi_worker=True), env={"PJRT_DEVICE": "CUDA"})
    assert p.argv[:3] == (PY, "-m", "opentc_launcher.run")
    assert option(p.argv, "--nproc-per-node") == "8"
    assert "--standalone" in p.argv and "--master-addr" not in p.argv   # no name resolution at all
    assert p.peers == () and p.uses_launcher and p.world_size == 8
    assert option(p.argv, "--failure-report") == "/tmp/scratch/failure-report.json"


@pytest.mark.parametrize("current,rank", [("algo-1", 0), ("algo-2", 1), ("algo-3", 2)])
def test_multi_host_rendezvous_on_first_host(current, rank):
    hosts = ("algo-1", "algo-2", "algo-3")
    p = plan(job(hosts=hosts, current=current, gpus=4), CompilerSettings(enabled=True, multi_worker=True),
             env={"PJRT_DEVICE": "CUDA"}, launch=LaunchSettings(master_port=7777, peer_timeout=42))
    assert option(p.argv, "--nnodes") == "3" and option(p.argv, "--node-rank") == str(rank)
    assert option(p.argv, "--master-addr") == "algo-1" and option(p.argv, "--master-port") == "7777"
    assert option(p.argv, "--rdzv-conf") == "timeout=42"
    assert p.peers == tuple(h for h in hosts if h != current)
    assert p.world_size == 12


def test_several_hosts_without_multi_worker_train_independently():
    p = plan(job(hosts=("algo-1", "algo-2"), current="algo-2"), CompilerSettings(enabled=True),
             env={"PJRT_DEVICE": "CPU"})
    assert not p.uses_launcher and p.peers == ()


def test_xla_cpu_with_several_workers_is_refused_before_launch():
    with pytest.raises(JobConfigError, match="no cross-process collectives"):
        plan(job(hosts=("a", "b"), current="a"), CompilerSettings(enabled=True, multi_worker=True),
             env={"PJRT_DEVICE": "CPU"})
    # asked for explicitly, it runs
    p = plan(job(hosts=("a", "b"), current="a"),
             CompilerSettings(enabled=True, multi_worker=True, cpu_multi_worker="unsynchronized"),
             env={"PJRT_DEVICE": "CPU"})
    assert option(p.argv, "--cpu-multi-worker") == "unsynchronized"
    # plain PyTorch on CPU is fine: gloo has collectives
    plan(job(hosts=("a", "b"), current="a"), CompilerSettings(enabled=False, multi_worker=True))


def test_workers_per_host_override_and_bad_values():
    p = plan(job(), CompilerSettings(enabled=False, multi_worker=True), launch=LaunchSettings(workers_per_host=3))
    assert option(p.argv, "--nproc-per-node") == "3"
    assert LaunchSettings.from_env({"OPENTC_WORKERS_PER_HOST": "2", "OPENTC_PEER_TIMEOUT": "1.5"}) == \
        LaunchSettings(workers_per_host=2, peer_timeout=1.5)
    for name, value in [("OPENTC_WORKERS_PER_HOST", "0"), ("OPENTC_PEER_TIMEOUT", "soon"), ("MASTER_PORT", "-1")]:
        with pytest.raises(JobConfigError, match=name):
            LaunchSettings.from_env({name: value})


def test_bad_pjrt_device_is_named():
    with pytest.raises(JobConfigError, match="PJRT_DEVICE='GPU'"):
        plan(job(), CompilerSettings(enabled=True), env={"PJRT_DEVICE": "GPU"})


def test_hyperparameters_stay_one_argv_element_each():
    hostile = ("--note", "a b; touch /tmp/pwned $(id) `id` | cat")
    p = plan(job(args=hostile), CompilerSettings(enabled=False))
    assert p.argv[-2:] == hostile


def test_cache_folder_defaults_under_checkpoints():
    p = plan(job(), CompilerSettings(enabled=True), env={"PJRT_DEVICE": "CPU"})
    assert option(p.argv, "--compile-cache-dir") == os.path.join("/opt/ml/checkpoints", "xla-compile-cache")
    assert option(p.argv, "--compile-report-dir") == "/opt/ml/output/data/compiler"
    p = plan(job(), CompilerSettings(enabled=True, cache=False), env={"PJRT_DEVICE": "CPU"})
    assert option(p.argv, "--compile-cache-dir") == ""

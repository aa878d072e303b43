"""Launch plans: argv and environment for each kind of job (pure functions; GPUs are only numbers here)."""

import os
from importlib.metadata import version
from types import MappingProxyType

import pytest

from conftest import launch_context
from opentc_launcher.decision import LaunchRefused, decide
from opentc_launcher.host import HostFacts
from opentc_launcher.launch_context import LaunchContext
from opentc_launcher.options import WorkerOptions
from opentc_toolkit.contract import contract_environment
from opentc_toolkit.distributions import Distribution
from opentc_toolkit.job import JobPaths, TrainingJob
from opentc_toolkit.job_settings import JobSettings
from opentc_toolkit.not_started import BadInput
from opentc_toolkit.outcome import LauncherFailureReport, WorkerErrorFile
from opentc_toolkit.plan import MAX_ARG_BYTES, LaunchSettings, build_plan

PY = "/usr/bin/python3"


def job(hosts=("algo-1",), current="algo-1", gpus=0, args=("--epochs", "3"), script_env=None):
    return TrainingJob(
        paths=JobPaths("/opt/ml"), entry_point="train.py", submit_directory="/opt/ml/code",
        hyperparameters=MappingProxyType({}), framework_params=MappingProxyType({}), user_args=tuple(args),
        hosts=tuple(hosts), current_host=current, machine=HostFacts(cpus=2, gpus=gpus),
        script_env=MappingProxyType(script_env or {}))


def plan(j, settings, env=None, launch=None):
    return build_plan(j, settings, launch or LaunchSettings(), env or {}, "/opt/ml/code/train.py", "/opt/ml/code",
                      "/tmp/scratch", python=PY)


def option(argv, name):
    return argv[argv.index(name) + 1]


def test_single_worker_runs_the_bootstrap_in_one_process():
    p = plan(job(), JobSettings(enabled=True))
    argv = p.command.argv
    assert argv[:3] == (PY, "-m", "opentc_launcher.worker")   # no console script beside this python
    assert argv[-3:] == ("/opt/ml/code/train.py", "--epochs", "3")
    assert option(argv, "--backend") == "xla" and option(argv, "--device") == "cpu"
    assert not p.command.workers_are_children and p.world.size == 1 and p.peers == ()
    assert p.failure_source == WorkerErrorFile("/tmp/scratch/worker-error.json")
    assert p.command.env["TORCHELASTIC_ERROR_FILE"] == "/tmp/scratch/worker-error.json"
    assert p.command.cwd == "/opt/ml/code"
    # one worker never gets torchrun's variables: HF would think it is distributed
    assert "RANK" not in p.command.env and "WORLD_SIZE" not in p.command.env


def test_compiler_off_uses_the_eager_backend_and_no_cache():
    p = plan(job(), JobSettings(enabled=False, compiler_name="inductor"))
    assert option(p.command.argv, "--backend") == "eager"
    assert option(p.command.argv, "--compile-cache-dir") == ""
    assert p.command.env["USE_TORCH_XLA"] == "0"


@pytest.mark.parametrize("enabled", [True, False])
def test_debug_mode_reaches_the_workers_as_an_option_with_the_compiler_on_only(enabled):
    """Issue 41: debug mode travels like the backend, on the worker's command line, to the backend's session, which
    sets its switches in the worker's own process (tests/test_compiler_settings.py); the plan's environment has
    none of them, compiler on or off."""
    settings = JobSettings.from_hyperparameters({"sagemaker_training_compiler_enabled": enabled,
                                                 "sagemaker_training_compiler_debug_mode": True})
    p = plan(job(), settings)
    assert settings.debug and p.options.debug_mode == enabled
    assert option(p.command.argv, "--debug-mode") == str(enabled)
    assert not {"XLA_METRICS_FILE", "XLA_IR_DEBUG", "XLA_FLAGS", "TORCH_TRACE"} & set(p.command.env)
    if enabled:
        assert p.options.debug_dir == "/opt/ml/output/data/compiler"
        assert option(p.command.argv, "--debug-dir") == "/opt/ml/output/data/compiler"


def test_multi_worker_one_host_is_a_local_rendezvous_with_one_worker_per_gpu():
    p = plan(job(gpus=8), JobSettings(enabled=True, distribution=Distribution.DATA_PARALLEL))
    argv = p.command.argv
    assert argv[:3] == (PY, "-m", "opentc_launcher.run")
    assert option(argv, "--nproc-per-node") == "8" and option(argv, "--device") == "cuda"
    assert "--standalone" in argv and "--master-addr" not in argv   # no name resolution at all
    assert p.peers == () and p.command.workers_are_children and p.world.size == 8
    assert p.failure_source == LauncherFailureReport("/tmp/scratch/failure-report.json")
    assert option(argv, "--failure-report") == "/tmp/scratch/failure-report.json"
    assert p.command.env["GPU_NUM_DEVICES"] == "8"


@pytest.mark.parametrize(("current", "rank"), [("algo-1", 0), ("algo-2", 1), ("algo-3", 2)])
def test_multi_host_rendezvous_on_first_host(current, rank):
    hosts = ("algo-1", "algo-2", "algo-3")
    p = plan(job(hosts=hosts, current=current, gpus=4),
             JobSettings(enabled=True, distribution=Distribution.DATA_PARALLEL),
             launch=LaunchSettings(master_port=7777, peer_timeout=42))
    argv = p.command.argv
    assert option(argv, "--nnodes") == "3" and option(argv, "--node-rank") == str(rank)
    assert option(argv, "--master-addr") == "algo-1" and option(argv, "--master-port") == "7777"
    assert option(argv, "--rdzv-conf") == "timeout=42"
    assert p.peers == tuple(h for h in hosts if h != current)
    assert p.world.size == 12


def test_several_hosts_without_multi_worker_run_one_process_each_that_can_meet_the_others():
    """Issue 52: as on SageMaker's PyTorch images, the script gets the master's address and port (and no rank or world
    size: it passes them to init_process_group itself), and the other hosts' names are waited for."""
    p = plan(job(hosts=("algo-1", "algo-2"), current="algo-2"), JobSettings(enabled=True))
    assert not p.command.workers_are_children and p.peers == ("algo-1",) and p.world.size == 1
    assert (p.command.env["MASTER_ADDR"], p.command.env["MASTER_PORT"]) == ("algo-1", "7777")
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK"} & set(p.command.env)


def test_every_job_gets_what_sagemakers_pytorch_images_give_it():
    """aws/sagemaker-pytorch-training-toolkit's training.py, for every job: MASTER_ADDR=hosts[0], MASTER_PORT=7777
    (MASTER_PORT in the container's environment moves it), NCCL's socket settings (the container's own kept) and the
    torch version. One worker only gets the master: several get opentc-run's world."""
    single = plan(job(script_env={"SM_NETWORK_INTERFACE_NAME": "lo"}), JobSettings(enabled=False),
                  env={"NCCL_DEBUG": "INFO"}, launch=LaunchSettings.from_env({"MASTER_PORT": "6000"}))
    env = single.command.env
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("algo-1", "6000")
    assert (env["NCCL_IB_DISABLE"], env["NCCL_DEBUG"], env["NCCL_SOCKET_IFNAME"]) == ("1", "INFO", "lo")
    assert env["SM_DLC_TORCH_VERSION"] == version("torch")
    several = plan(job(gpus=2), JobSettings(enabled=False, distribution=Distribution.DATA_PARALLEL))
    assert "MASTER_ADDR" not in several.command.env and "MASTER_PORT" not in several.command.env
    assert several.command.env["NCCL_IB_DISABLE"] == "1"


@pytest.mark.parametrize(("named", "interfaces", "expected"), [
    ("eth0", {"lo", "eth0"}, "eth0"), ("eth", {"lo", "eth0"}, "eth"),   # NCCL reads the name as a prefix
    ("eth0", {"lo", "ens5"}, None), ("", {"lo"}, None)])
def test_nccl_is_given_the_interface_sagemaker_names_only_where_this_machine_has_it(named, interfaces, expected):
    found = contract_environment(("algo-1",), {"SM_NETWORK_INTERFACE_NAME": named}, 7777, True, interfaces)
    assert found.defaults.get("NCCL_SOCKET_IFNAME") == expected


def test_xla_cpu_with_several_workers_is_refused_before_launch():
    with pytest.raises(BadInput, match="no cross-process collectives"):
        plan(job(hosts=("a", "b"), current="a"), JobSettings(enabled=True, distribution=Distribution.DATA_PARALLEL))
    # asked for explicitly, it runs
    p = plan(job(hosts=("a", "b"), current="a"),
             JobSettings(enabled=True, distribution=Distribution.DATA_PARALLEL,
                         worker=WorkerOptions(cpu_multi_worker="unsynchronized")))
    assert option(p.command.argv, "--cpu-multi-worker") == "unsynchronized"
    # plain PyTorch on CPU is fine: gloo has collectives
    plan(job(hosts=("a", "b"), current="a"), JobSettings(enabled=False, distribution=Distribution.DATA_PARALLEL))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_worker_settings_a_job_sets_reach_its_workers_with_the_compiler_on_or_off(enabled):
    settings = JobSettings.from_hyperparameters({"sagemaker_training_compiler_enabled": enabled,
                                                 "sagemaker_training_compiler_warmup_steps": "2"})
    p = plan(job(), settings)
    assert p.options.warmup_steps == 2 and option(p.command.argv, "--warmup-steps") == "2"
    assert p.options.backend == ("xla" if enabled else "eager")


def test_workers_per_host_override_and_bad_values():
    p = plan(job(), JobSettings(enabled=False, distribution=Distribution.DATA_PARALLEL),
             launch=LaunchSettings(workers_per_host=3))
    assert option(p.command.argv, "--nproc-per-node") == "3"
    assert LaunchSettings.from_env({"OPENTC_WORKERS_PER_HOST": "2", "OPENTC_PEER_TIMEOUT": "1.5"}) == \
        LaunchSettings(workers_per_host=2, peer_timeout=1.5)


@pytest.mark.parametrize(("name", "value"), [
    ("OPENTC_WORKERS_PER_HOST", "0"), ("OPENTC_WORKERS_PER_HOST", "2.5"), ("OPENTC_PEER_TIMEOUT", "soon"),
    ("OPENTC_PEER_TIMEOUT", "nan"), ("OPENTC_PEER_TIMEOUT", "inf"), ("OPENTC_PEER_TIMEOUT", "-1"),
    ("OPENTC_TERMINATION_GRACE", "nan"), ("OPENTC_TERMINATION_GRACE", "-inf"), ("OPENTC_TERMINATION_GRACE", "-5"),
    ("MASTER_PORT", "-1"), ("MASTER_PORT", "0"),
])
def test_launch_settings_refuse_what_cannot_work(name, value):
    with pytest.raises(BadInput, match=f"environment variable {name}={value!r} is not accepted: use "):
        LaunchSettings.from_env({name: value})


def test_bad_pjrt_device_is_named():
    with pytest.raises(BadInput, match="PJRT_DEVICE='GPU'"):
        plan(job(), JobSettings(enabled=True), env={"PJRT_DEVICE": "GPU"})


def test_the_users_pjrt_device_decides_and_cuda_needs_a_gpu():
    p = plan(job(gpus=2), JobSettings(enabled=True), env={"PJRT_DEVICE": "cpu"})
    assert option(p.command.argv, "--device") == "cpu"
    with pytest.raises(BadInput, match=r"^no GPU visible: PJRT_DEVICE=CUDA asks for XLA:CUDA"):
        plan(job(gpus=0), JobSettings(enabled=True), env={"PJRT_DEVICE": "CUDA"})


def test_the_decision_is_made_once_deciding_again_changes_nothing():
    for backend in ("xla", "inductor", "eager"):
        requested = WorkerOptions(backend=backend, cpu_multi_worker="unsynchronized")
        for gpus, world in [(0, 1), (0, 4), (8, 8)]:
            decided = decide(requested, launch_context(gpus, world))
            assert decided.device == ("cuda" if gpus else "cpu") and decided.gpu_count == gpus
            assert decide(decided, launch_context(gpus, world)) == decided


def test_backends_decide_from_the_host_the_launch_probed_not_from_a_probe_of_their_own():
    """Issue 53: the context carries the host record; a driver too old for torch's CUDA, as the job's probe found it,
    refuses the GPU launch (this machine has no driver at all: a probe of the backend's own would find nothing)."""
    old_driver = HostFacts(cpus=2, gpus=1, driver_cuda=(11, 8), torch_cuda=(12, 6))
    with pytest.raises(LaunchRefused, match=r"driver supports CUDA 11\.8; this image's torch .* built for CUDA 12\.6"):
        decide(WorkerOptions(backend="eager"), LaunchContext(old_driver, 1, {}))


def test_a_launch_handed_a_decision_neither_counts_the_gpus_nor_decides_again(monkeypatch):
    """opentc-run started by train (or a worker started by opentc-run) gets --device and --gpu-count: it applies them.
    Started with neither, it is the outermost launcher: it probes the host once, and decides."""
    from opentc_launcher import decision, run

    probed = []
    monkeypatch.setattr(decision, "probe_host", lambda env: probed.append(1) or HostFacts(cpus=2, gpus=0))
    handed = run.configure(["--dry-run", "--standalone", "--nproc-per-node", "2", "--backend", "eager", "--device",
                            "cuda", "--gpu-count", "8", "train.py"])
    assert probed == [] and (handed.options.device, handed.options.gpu_count) == ("cuda", 8)
    own = run.configure(["--dry-run", "--standalone", "--nproc-per-node", "2", "--backend", "eager", "train.py"])
    assert probed == [1] and (own.options.device, own.options.gpu_count) == ("cpu", 0)
    decided = own.options
    assert decision.decided_once(decided, launch_context(gpus=4)) is decided   # no second decision


def test_hyperparameters_stay_one_argv_element_each():
    hostile = ("--note", "a b; touch /tmp/pwned $(id) `id` | cat")
    p = plan(job(args=hostile), JobSettings(enabled=False))
    assert p.command.argv[-2:] == hostile


def test_what_the_kernel_would_refuse_is_named_before_anything_starts():
    with pytest.raises(BadInput, match=f"hyperparameter blob is {MAX_ARG_BYTES + 1} bytes long"):
        plan(job(args=("--blob", "x" * (MAX_ARG_BYTES + 1))), JobSettings(enabled=False))
    with pytest.raises(BadInput, match="the environment variable SM_HPS would be"):
        plan(job(script_env={"SM_HPS": "y" * MAX_ARG_BYTES}), JobSettings(enabled=False))


def test_cache_folder_defaults_under_checkpoints():
    p = plan(job(), JobSettings(enabled=True))
    assert option(p.command.argv, "--compile-cache-dir") == os.path.join("/opt/ml/checkpoints", "compile-cache")
    assert option(p.command.argv, "--compile-report-dir") == "/opt/ml/output/data/compiler"
    p = plan(job(), JobSettings(enabled=True, cache=False))
    assert option(p.command.argv, "--compile-cache-dir") == ""


STALE = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "1234",
         "PET_NNODES": "4", "TORCHELASTIC_RUN_ID": "old", "PJRT_LOCAL_PROCESS_RANK": "3"}


@pytest.mark.parametrize("distribution", [Distribution.NONE, Distribution.DATA_PARALLEL])
def test_a_stale_world_in_the_environment_never_reaches_the_launch(distribution):
    p = plan(job(gpus=2), JobSettings(enabled=True, distribution=distribution), env={**STALE, "HOME": "/root"})
    # one worker: only the job's own master (SageMaker's PyTorch images'); several: opentc-run's own world
    ours = {"MASTER_ADDR": "algo-1", "MASTER_PORT": "7777"} if distribution is Distribution.NONE else {}
    assert {k: v for k, v in p.command.env.items() if k in STALE} == ours, p.command.env
    assert p.command.env["HOME"] == "/root"
    assert dict(p.replaced_variables) == STALE


def test_sm_variables_describe_this_job_and_replace_preset_ones():
    j = job(script_env={"SM_MODEL_DIR": "/opt/ml/model", "SM_HPS": "{}"})
    p = plan(j, JobSettings(), env={"SM_MODEL_DIR": "/elsewhere", "SM_HPS": "{}", "SM_EXTRA": "mine"})
    assert p.command.env["SM_MODEL_DIR"] == "/opt/ml/model" and p.command.env["SM_EXTRA"] == "mine"
    assert dict(p.replaced_variables) == {"SM_MODEL_DIR": "/elsewhere"}   # the same value is no replacement


def test_the_inductor_backend_plans_plain_pytorch_workers_that_compile():
    p = plan(job(gpus=0), JobSettings(enabled=True, compiler_name="inductor", distribution=Distribution.DATA_PARALLEL),
             launch=LaunchSettings(workers_per_host=2))
    argv = p.command.argv
    assert option(argv, "--backend") == "inductor" and option(argv, "--device") == "cpu"
    assert option(argv, "--nproc-per-node") == "2"            # several CPU workers: gloo has collectives
    assert p.command.env["USE_TORCH_XLA"] == "0" and p.command.env["ACCELERATE_DYNAMO_BACKEND"] == "inductor"
    assert option(argv, "--compile-cache-dir") == os.path.join("/opt/ml/checkpoints", "compile-cache")
    # The toolkit opens and publishes the working copy (entry, wrap_up): opentc-run is told to leave it (issue 40 I).
    assert option(argv, "--compile-cache-work-dir") and "--compile-cache-copy-opened" in argv
    p = plan(job(gpus=4), JobSettings(enabled=True, compiler_name="inductor"),
             env={"ACCELERATE_DYNAMO_BACKEND": "aot_eager", "ACCELERATE_DYNAMO_MODE": "max-autotune"})
    assert option(p.command.argv, "--device") == "cuda"
    assert p.command.env["ACCELERATE_DYNAMO_BACKEND"] == "aot_eager"            # the user's choice is kept ...
    assert dict(p.kept_variables) == {"ACCELERATE_DYNAMO_BACKEND": "aot_eager"}  # ... and said
    assert p.command.env["ACCELERATE_DYNAMO_MODE"] == "max-autotune"

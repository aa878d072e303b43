"""The launch plan: what runs the job on this host, as a command line and an environment. Functions of their
arguments that start nothing and write nothing; they read the machine only where the launch depends on it
(decide() asks whether the backend is installed and, for a GPU launch, may ask the CUDA driver what it supports).

Every fact of the launch is decided here, once: the workers per host and the rendezvous (from the job and
LaunchSettings), the PJRT device and the CPU multi-worker policy (through opentc_launcher.decision, the
function `opentc-run` uses on its own). The workers receive the decision as options and apply it.

plan_job, at the end, takes a job from its files to this plan: every decision a job makes before anything of the
user's is installed or started, the same for `train` (entry.run_job, which then runs the plan) and `train --dry-run`
(dry_run.py, which prints it).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from opentc_launcher.api import (
    SETTING_NAMES_VARIABLE,
    LaunchContext,
    LaunchRefused,
    Rendezvous,
    WorkerOptions,
    compiler_environment,
    decide,
    run_argv,
    too_many_workers,
    with_working_copy,
    worker_command,
)
from opentc_launcher.common import MAX_PORT, BadEnvironmentValue, number_from_env

from .aws_launcher import adapt_aws_launcher
from .contract import SAGEMAKER_MASTER_PORT, contract_environment, network_interfaces
from .job import JobPaths, TrainingJob, read_job
from .job_settings import JobSettings
from .model_trainer import adapt_model_trainer
from .not_started import BadInput
from .outcome import FailureSource, LauncherFailureReport, WorkerErrorFile
from .output_folders import check_output_folders
from .sharding import check_sharding
from .source import code_folder, entry_point_path, fetch_code
from .supervisor import Command

log = logging.getLogger("opentc_toolkit")

DEFAULT_PEER_TIMEOUT = 300.0
DEFAULT_GRACE = 90.0
DEFAULT_FINISH_TIMEOUT = 300.0   # debug mode's reports and the cache's publication, after the workers
DEFAULT_HOSTS_END_TIMEOUT = 60.0   # a multi-host job's hosts waiting for each other's verdicts (hosts_end.py)
DEFAULT_CACHE_FOLDER = "compile-cache"   # under the checkpoints folder; a sub-folder per backend, version and device
WORKER_RECORDS = "worker-records"   # in the run's scratch folder: each worker's measurements, for the job summary
# Linux refuses a single argument or environment entry longer than this (MAX_ARG_STRLEN, 32 pages).
MAX_ARG_BYTES = 131072


# Each LaunchSettings field and the variable of the container's it is read from.
LAUNCH_VARIABLES = MappingProxyType({
    "workers_per_host": "OPENTC_WORKERS_PER_HOST", "peer_timeout": "OPENTC_PEER_TIMEOUT",
    "grace": "OPENTC_TERMINATION_GRACE", "master_port": "MASTER_PORT", "finish_timeout": "OPENTC_FINISH_TIMEOUT",
    "hosts_end_timeout": "OPENTC_HOSTS_END_TIMEOUT"})


@dataclass(frozen=True)
class LaunchSettings:
    """Knobs that are not part of the job's hyperparameters, read from the container's environment."""

    workers_per_host: int | None = None   # OPENTC_WORKERS_PER_HOST: overrides the GPU count
    peer_timeout: float = DEFAULT_PEER_TIMEOUT  # OPENTC_PEER_TIMEOUT: seconds to wait for the other hosts
    grace: float = DEFAULT_GRACE             # OPENTC_TERMINATION_GRACE: seconds between SIGTERM and SIGKILL
    master_port: int = SAGEMAKER_MASTER_PORT   # MASTER_PORT: the job's port on hosts[0] (SageMaker's images': 7777)
    finish_timeout: float = DEFAULT_FINISH_TIMEOUT   # OPENTC_FINISH_TIMEOUT: seconds for the work after the workers
    hosts_end_timeout: float = DEFAULT_HOSTS_END_TIMEOUT   # OPENTC_HOSTS_END_TIMEOUT: a host waiting for the others

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LaunchSettings:
        named = LAUNCH_VARIABLES
        try:
            return cls(
                workers_per_host=number_from_env(env, named["workers_per_host"], int, None, minimum=1),
                peer_timeout=number_from_env(env, named["peer_timeout"], float, DEFAULT_PEER_TIMEOUT),
                grace=number_from_env(env, named["grace"], float, DEFAULT_GRACE),
                master_port=number_from_env(env, named["master_port"], int, SAGEMAKER_MASTER_PORT, minimum=1,
                                            maximum=MAX_PORT),
                finish_timeout=number_from_env(env, named["finish_timeout"], float, DEFAULT_FINISH_TIMEOUT),
                hosts_end_timeout=number_from_env(env, named["hosts_end_timeout"], float, DEFAULT_HOSTS_END_TIMEOUT),
            )
        except BadEnvironmentValue as e:
            raise BadInput(str(e)) from None


@dataclass(frozen=True)
class World:
    """The processes of the job: hosts (nodes) times workers per host, meeting on master_addr."""

    nodes: int = 1
    node_rank: int = 0
    workers_per_host: int = 1
    master_addr: str = "127.0.0.1"

    @property
    def size(self) -> int:
        return self.nodes * self.workers_per_host


@dataclass(frozen=True)
class LaunchPlan:
    command: Command                  # what the supervisor runs
    options: WorkerOptions            # what every worker runs with (the decided device included)
    context: LaunchContext            # what it was decided by: the machine, the world, the environment
    world: World
    peers: tuple[str, ...]            # other hosts that must resolve before the launch
    failure_source: FailureSource     # where the failed worker's own account of it will be
    kept_variables: Mapping[str, str]  # variables the compiler would set that the user had set: kept
    replaced_variables: Mapping[str, str]  # facts of the job the container's environment had otherwise: replaced


# Variables that describe the distributed world, torchrun's and torch-xla's. The toolkit decides the world: a value
# left in the container's environment (a Kubernetes pod's, a wrapper's) would make a single worker think it is
# rank 3 of 4 or dial a master that does not exist, so none of them reaches the launch. A single worker gets only
# MASTER_ADDR and MASTER_PORT, as SageMaker's PyTorch images give every job (contract.py), and no rank or world size
# (as `python train.py` would: with LOCAL_RANK or WORLD_SIZE set, transformers and accelerate would take it for a
# distributed run); opentc-run gives each of several workers its own.
WORLD_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                             "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "PJRT_LOCAL_PROCESS_RANK", "PJRT_LOCAL_PROCESS_COUNT"})
WORLD_PREFIXES = ("TORCHELASTIC_", "PET_")   # torch.distributed.elastic's, and torchrun's options as variables


def is_world_variable(name: str) -> bool:
    return name in WORLD_VARIABLES or name.startswith(WORLD_PREFIXES)


def plan_world(job: TrainingJob, settings: JobSettings, launch: LaunchSettings) -> tuple[World, tuple[str, ...]]:
    """Workers per host and the rendezvous: one worker, or (multi-worker) one per GPU on every host (or as many
    as OPENTC_WORKERS_PER_HOST, else the job itself (an AWS-era launcher's num_gpus), else the SDK v3's
    Torchrun(process_count_per_node), says), meeting on hosts[0] (hosts[] is in the same order on every host).
    Returns the world and the peers to wait for: every other host of a multi-host job, whose name the script may
    dial (MASTER_ADDR) even when the launcher starts one process per host and meets nobody."""
    others = tuple(h for h in job.hosts if h != job.current_host)
    if not settings.multi_worker:
        return World(), others
    workers = launch.workers_per_host or job.workers_per_host or max(job.num_gpus, 1)
    asked_by = ("OPENTC_WORKERS_PER_HOST" if launch.workers_per_host else job.workers_asked_by or "the job"
                if job.workers_per_host else "the GPU count")
    too_many = too_many_workers(workers, job.num_gpus, asked_by)
    if too_many:
        raise BadInput(too_many)
    if not job.is_multi_host:
        return World(workers_per_host=workers), ()
    world = World(nodes=len(job.hosts), node_rank=job.host_index, workers_per_host=workers,
                  master_addr=job.hosts[0])
    return world, others


def launch_context(settings: JobSettings, job: TrainingJob, world: World, env: Mapping[str, str]) -> LaunchContext:
    """What the launch is decided by: the machine the job read (probed once), the world, and the container's
    environment with the hyperparameters' names for the launcher's settings."""
    return LaunchContext(job.machine, world.size, with_setting_names(env, settings))


def worker_options(settings: JobSettings, job: TrainingJob, context: LaunchContext) -> WorkerOptions:
    """What every worker runs with; the device and the CPU multi-worker policy decided for this world. The options
    the hyperparameters set reach the workers with the compiler off too (eager ignores what it has no use for)."""
    # Debug mode is the compiler's: with the compiler off the workers do not get it (entry.announce says so).
    requested = replace(settings.worker, backend="eager", debug_mode=False)
    if settings.enabled:
        cache_dir = ""
        if settings.cache:
            cache_dir = settings.cache_dir or os.path.join(job.paths.checkpoints, DEFAULT_CACHE_FOLDER)
        requested = replace(settings.worker,   # the options the hyperparameters set
                            backend=settings.compiler_name,
                            compile_report_dir=job.paths.compiler_output,
                            compile_cache_dir=cache_dir,
                            debug_dir=job.paths.compiler_output)
    try:
        return decide(requested, context)
    except LaunchRefused as e:
        raise BadInput(str(e)) from None


def with_setting_names(env: Mapping[str, str], settings: JobSettings) -> dict[str, str]:
    """`env` with the hyperparameters' names for the launcher's settings (JobSettings.setting_names), which the launcher
    and its workers word their messages with."""
    return {**env, SETTING_NAMES_VARIABLE: json.dumps(settings.setting_names())}


def check_os_limits(argv: tuple[str, ...], env: Mapping[str, str]) -> None:
    """What the kernel would refuse at exec (E2BIG), named before anything starts."""
    for i, arg in enumerate(argv):
        size = len(arg.encode("utf-8", "surrogateescape"))
        if size > MAX_ARG_BYTES:
            option = argv[i - 1] if i > 0 and argv[i - 1].startswith("-") else ""
            what = f"hyperparameter {option.lstrip('-')}" if option else f"the command-line value {arg[:40]!r}..."
            raise BadInput(
                f"{what} is {size} bytes long on the command line; Linux passes at most {MAX_ARG_BYTES} bytes per "
                f"argument. Hyperparameters reach the script as --name value: put a large value in a file of an "
                f"input channel and pass its name instead.")
    for name, value in env.items():
        size = len(name.encode()) + 1 + len(value.encode("utf-8", "surrogateescape"))
        if size > MAX_ARG_BYTES:
            raise BadInput(
                f"the environment variable {name} would be {size} bytes long; Linux passes at most "
                f"{MAX_ARG_BYTES} bytes per variable. SM_HPS, SM_TRAINING_ENV and SM_HP_<NAME> carry the "
                f"hyperparameters: put a large value in a file of an input channel and pass its name instead.")


def build_plan(job: TrainingJob, settings: JobSettings, launch: LaunchSettings, base_env: Mapping[str, str],
               script: str, code_dir: str, scratch: str, python: str = sys.executable) -> LaunchPlan:
    """How to run `script` (in the folder `code_dir`, where the workers start) for this job on this host.

    `base_env` is the container's environment. The workers get it with the facts of this job in place of any it
    had (the SM_* variables, the world: see WORLD_VARIABLES), what SageMaker's PyTorch images give every job
    (contract.py) and the compiler's variables added (a variable the user set is kept). `scratch` is a folder for
    the run's own files.
    """
    world, peers = plan_world(job, settings, launch)
    context = launch_context(settings, job, world, base_env)
    options = worker_options(settings, job, context)
    # The workers' records, and the working copy of the cache this run opens and publishes (entry, wrap_up).
    options = with_working_copy(replace(options, summary_dir=os.path.join(scratch, WORKER_RECORDS)), scratch)
    changes = compiler_environment(options, context)
    contract = contract_environment(job.hosts, job.script_env, launch.master_port, not settings.multi_worker,
                                    network_interfaces())
    decided = {**job.script_env, **contract.decided}
    env = {**contract.defaults, **{k: v for k, v in base_env.items() if not is_world_variable(k)}, **decided,
           **changes.applied, **with_setting_names({}, settings)}
    env.setdefault("PYTHONUNBUFFERED", "1")
    check_sharding(job.hyperparameters, env, options.device)
    script_part = [*options.to_argv(), script, *job.user_args]
    failure_source: FailureSource
    if settings.multi_worker:
        failure_source = LauncherFailureReport(os.path.join(scratch, "failure-report.json"))
        rendezvous = None if world.nodes == 1 else Rendezvous(
            nodes=world.nodes, node_rank=world.node_rank, master_addr=world.master_addr,
            master_port=launch.master_port, timeout=launch.peer_timeout)
        argv = [*run_argv(python, world.workers_per_host, failure_report=failure_source.path,
                          log_dir=os.path.join(scratch, "torchrun"), rendezvous=rendezvous,
                          cache_copy_opened=bool(options.compile_cache_work_dir)), *script_part]
    else:
        failure_source = WorkerErrorFile(os.path.join(scratch, "worker-error.json"))
        argv = [*worker_command(python), *script_part]
        env["TORCHELASTIC_ERROR_FILE"] = failure_source.path
    check_os_limits(tuple(argv), env)
    replaced = {k: v for k, v in base_env.items() if (k in decided or is_world_variable(k)) and env.get(k) != v}
    return LaunchPlan(
        command=Command(argv=tuple(argv), env=MappingProxyType(env), cwd=code_dir,
                        workers_are_children=settings.multi_worker),
        options=options,
        context=context,
        world=world,
        peers=peers,
        failure_source=failure_source,
        kept_variables=changes.kept,
        replaced_variables=MappingProxyType(replaced),
    )


@dataclass(frozen=True)
class PlannedJob:
    job: TrainingJob            # as the adapters left it (an SDK v3 layout, an AWS-era launcher)
    settings: JobSettings
    code: str                   # the folder the code is in (a dry run's: a copy under its scratch folder)
    plan: LaunchPlan            # runs the code from the folder a real run puts it in


def plan_job(paths: JobPaths, launch: LaunchSettings, base_env: Mapping[str, str], scratch: str,
             noted: Callable[[TrainingJob, JobSettings | None], None] = lambda job, settings: None,
             dry_run: bool = False, stopped: Callable[[], bool] = lambda: False) -> PlannedJob:
    """Read the job, choose its settings, fetch its code, plan the launch and check the output folders; `noted`
    learns the job and its settings as soon as each is known (the job summary names them even when a later step
    refuses the job). A `dry_run` writes nothing of the job's: the code is fetched under `scratch`, and the output
    folders are checked, not made. Raises JobNotStarted (BadInput) for anything the job cannot run with, and
    source.FetchStopped when `stopped` says the job is stopping while its code is fetched."""
    job = read_job(paths)
    noted(job, None)
    settings = JobSettings.from_hyperparameters(job.framework_params, job.hyperparameters)
    noted(job, settings)
    settings.check_installed(base_env)
    adapted = adapt_model_trainer(job, settings)
    if adapted is not None:   # the job as the SageMaker SDK v3's ModelTrainer laid it out
        log.info("%s", adapted.summary)
        job, settings = adapted.job, adapted.settings
        noted(job, settings)
    code = fetch_code(job, scratch, into_scratch=dry_run, stopped=stopped)
    adapted = adapt_aws_launcher(job, settings, code)
    if adapted is not None:   # the job as AWS's torch_xla.distributed.sm_dist would have run it
        log.info("%s", adapted.summary)
        job, settings = adapted.job, adapted.settings
        noted(job, settings)
        settings.check_installed(base_env)   # it runs on XLA: an image without torch-xla says so now
    # Everything that can refuse the job is decided here, before anything is installed or started.
    script = entry_point_path(job, code)
    runs_from = code_folder(job, scratch) if dry_run else code
    plan = build_plan(job, settings, launch, base_env, os.path.join(runs_from, os.path.relpath(script, code)),
                      runs_from, scratch)
    check_output_folders(paths, settings.enabled, create=not dry_run)
    return PlannedJob(job, settings, code, plan)

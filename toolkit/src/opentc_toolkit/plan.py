"""The launch plan: the command line and environment that run the job on this host. Pure functions."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Optional

from opentc_launcher.commands import run_command, worker_command
from opentc_launcher.options import XLA_DEVICES, WorkerOptions
from opentc_launcher.runtime import LaunchRefused, check_cpu_multi_worker

from .compiler import CompilerSettings
from .errors import JobConfigError
from .job import TrainingJob

DEFAULT_MASTER_PORT = 29500
DEFAULT_PEER_TIMEOUT = 300.0
DEFAULT_GRACE = 90.0
DEFAULT_CACHE_FOLDER = "xla-compile-cache"


@dataclass(frozen=True)
class LaunchSettings:
    """Knobs that are not part of the job's hyperparameters, read from the container's environment."""

    workers_per_host: Optional[int] = None   # OPENTC_WORKERS_PER_HOST: overrides the GPU count
    peer_timeout: float = DEFAULT_PEER_TIMEOUT  # OPENTC_PEER_TIMEOUT: seconds to wait for the other hosts
    grace: float = DEFAULT_GRACE             # OPENTC_TERMINATION_GRACE: seconds between SIGTERM and SIGKILL
    master_port: int = DEFAULT_MASTER_PORT   # MASTER_PORT: rendezvous port on hosts[0]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "LaunchSettings":
        def number(name: str, kind, default, minimum):
            text = env.get(name, "").strip()
            if not text:
                return default
            try:
                value = kind(text)
            except ValueError:
                value = None
            if value is None or value < minimum:
                raise JobConfigError(f"environment variable {name}={text!r} is not accepted: "
                                     f"use a number >= {minimum}.")
            return value

        return cls(
            workers_per_host=number("OPENTC_WORKERS_PER_HOST", int, None, 1),
            peer_timeout=number("OPENTC_PEER_TIMEOUT", float, DEFAULT_PEER_TIMEOUT, 0),
            grace=number("OPENTC_TERMINATION_GRACE", float, DEFAULT_GRACE, 0),
            master_port=number("MASTER_PORT", int, DEFAULT_MASTER_PORT, 1),
        )


@dataclass(frozen=True)
class LaunchPlan:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    workers_per_host: int
    nodes: int
    node_rank: int
    master_addr: str
    peers: tuple[str, ...]          # other hosts that must resolve before the launch
    error_file: str                 # one worker: where it records its error
    failure_report: str             # several workers: where opentc-run reports the failed one
    uses_launcher: bool             # True: opentc-run (torchrun) manages the workers

    @property
    def world_size(self) -> int:
        return self.nodes * self.workers_per_host


def worker_options(settings: CompilerSettings, job: TrainingJob, env: Mapping[str, str]) -> WorkerOptions:
    if not settings.enabled:
        return WorkerOptions(runtime="torch")
    cache_dir = ""
    if settings.cache:
        cache_dir = settings.cache_dir or os.path.join(job.paths.checkpoints, DEFAULT_CACHE_FOLDER)
    device = env.get("PJRT_DEVICE", "").strip().upper() or "auto"
    if device not in XLA_DEVICES:
        raise JobConfigError(f"PJRT_DEVICE={env['PJRT_DEVICE']!r} is not accepted: use CUDA, CPU or TPU, "
                             f"or leave it unset to let the toolkit choose.")
    return WorkerOptions(
        runtime="xla",
        xla_device=device,
        cpu_multi_worker=settings.cpu_multi_worker,
        compile_report_dir=job.paths.compiler_output,
        compile_cache_dir=cache_dir,
        max_compilations=settings.max_compilations,
    )


def build_plan(job: TrainingJob, settings: CompilerSettings, launch: LaunchSettings,
               env: Mapping[str, str], script: str, scratch: str,
               python: str = sys.executable) -> LaunchPlan:
    """How to run `script` for this job on this host.

    `env` is the complete environment of the workers (container environment, SM_* variables, compiler
    variables); this adds only what the launch itself needs.
    """
    options = worker_options(settings, job, env)
    workers = 1
    nodes, node_rank, master_addr, peers = 1, 0, "127.0.0.1", ()
    if settings.multi_worker:
        workers = launch.workers_per_host or max(job.num_gpus, 1)
        if job.is_multi_host:
            # hosts[] is in the same order on every host; hosts[0] hosts the rendezvous.
            nodes, node_rank, master_addr = len(job.hosts), job.host_index, job.hosts[0]
            peers = tuple(h for h in job.hosts if h != job.current_host)
    if options.runtime == "xla":
        try:
            check_cpu_multi_worker(options.xla_device, nodes * workers, options.cpu_multi_worker)
        except LaunchRefused as e:
            raise JobConfigError(str(e)) from None

    error_file = os.path.join(scratch, "worker-error.json")
    failure_report = os.path.join(scratch, "failure-report.json")
    worker_env = {**env, "PYTHONUNBUFFERED": env.get("PYTHONUNBUFFERED", "1")}
    script_part = [*options.to_argv(), script, *job.user_args]
    if settings.multi_worker:
        argv = [*run_command(python), "--nproc-per-node", str(workers),
                "--failure-report", failure_report, "--log-dir", os.path.join(scratch, "torchrun")]
        if nodes == 1:
            # A local rendezvous on a free port: a single host never resolves its own name.
            argv += ["--standalone"]
        else:
            argv += ["--nnodes", str(nodes), "--node-rank", str(node_rank),
                     "--master-addr", master_addr, "--master-port", str(launch.master_port),
                     "--rdzv-conf", f"timeout={max(1, int(launch.peer_timeout))}"]
        argv += script_part
    else:
        argv = [*worker_command(python), *script_part]
        worker_env["TORCHELASTIC_ERROR_FILE"] = error_file
    return LaunchPlan(
        argv=tuple(argv),
        env=MappingProxyType(worker_env),
        cwd=job.paths.code,
        workers_per_host=workers,
        nodes=nodes,
        node_rank=node_rank,
        master_addr=master_addr,
        peers=peers,
        error_file=error_file,
        failure_report=failure_report,
        uses_launcher=settings.multi_worker,
    )

"""`opentc-train --dry-run [JOB_DIR]` (the image's `train --dry-run`): the job's launch plan, printed, with nothing
run, installed or written.

The job is read and every decision a real run makes before its first process is made by the same function
(plan.plan_job: the settings, the adapters for AWS's launchers and the SDK v3's layout, the code fetched, the
launch plan), and requirements.txt is read and resolved as the job would (requirements_install.resolve: pip's own dry
run, which installs nothing), so bad input ends here as it would end the job: the same message and exit code, on
stderr, without a failure file. The plan goes to stdout: the settings and where each came from, the command, the
environment the workers get beside the container's, and what would be installed first, each package that moves.

The code is fetched into a folder of this run's own (removed at the end), never into the job's code folder.
"""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

from opentc_launcher.api import backend_named, library_changes_listing

from .hf_stack import installed_family
from .job import JobPaths
from .not_started import JobNotStarted
from .plan import LAUNCH_VARIABLES, LaunchSettings, PlannedJob, plan_job
from .requirements_install import (
    Resolution,
    check_requirements,
    described,
    failed_pip,
    pip_environment,
    requirements_path,
    resolve,
)
from .stack import stack_pins

log = logging.getLogger("opentc_toolkit")

RUN_FOLDER = "<run folder>"   # the run's scratch folder, a fresh temporary folder in a real run
# JobSettings' field for a hyperparameter of the compiler's namespace, where it is not the key's last part (a worker
# setting's is its option's name, in JobSettings.worker: compiler.WORKER_SETTINGS).


@dataclass(frozen=True)
class Installed:
    """What a job would install first: its requirements file, as pip's dry run resolved it."""

    name: str
    resolution: Resolution

    def describe(self) -> str:
        found = self.resolution.changes
        return (f"{self.name} from the code folder (pip, under the stack's pins): " +
                (described(found) if found else "nothing new, everything it asks for is installed already") +
                "".join(f"; {note}" for note in self.resolution.notes))


def resolved(job_plan: PlannedJob, base_env: Mapping[str, str], scratch: str) -> Installed | None:
    """The requirements file read and resolved as the job would (pip's dry run, which installs nothing), or None
    without one. Raises JobNotStarted as the job would."""
    name, code = job_plan.job.requirements_file, job_plan.code
    requirements = requirements_path(code, name)
    if requirements is None:
        return None
    pins = stack_pins()
    env = pip_environment(base_env, scratch)
    reading = check_requirements(requirements, name, pins, env)

    def pip(argv: tuple[str, ...], doing: str) -> None:
        done = subprocess.run(argv, env=env, cwd=code, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", check=False)
        if done.returncode != 0:
            raise failed_pip(name, code, doing, done.returncode, done.stderr)

    return Installed(name, resolve(requirements, name, reading, pins, installed_family(), scratch, pip))


def planned(paths: JobPaths, base_env: Mapping[str, str], scratch: str) -> tuple[PlannedJob, LaunchSettings,
                                                                                  Installed | None]:
    """The job's plan as `train` would make it (plan.plan_job, the code fetched into `scratch`), its launch
    settings, and what it would install first (None without a requirements file). Raises JobNotStarted as a real
    run would."""
    launch = LaunchSettings.from_env(base_env)
    job_plan = plan_job(paths, launch, base_env, scratch, dry_run=True)
    return job_plan, launch, resolved(job_plan, base_env, scratch)


LONG = 200   # a value longer than this is shortened in the printout (SM_TRAINING_ENV runs to kilobytes)


def as_written(value: object) -> str:
    """A setting as a hyperparameters.json value is written (true, "xla", 0)."""
    return json.dumps(value)


def short(value: str) -> str:
    return value if len(value) <= LONG else f"{value[:LONG - 40]}... ({len(value)} characters)"


def env_changes(base_env: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """The workers' environment against the container's: + added, ~ changed (with the container's value), - not
    passed on; sorted by name."""
    lines = []
    for name in sorted(set(base_env) | set(env)):
        if name not in base_env:
            lines.append(f"  + {name}={short(env[name])}")
        elif name not in env:
            lines.append(f"  - {name} (the container's {short(base_env[name])!r} is not passed on)")
        elif env[name] != base_env[name]:
            lines.append(f"  ~ {name}={short(env[name])} (the container's: {short(base_env[name])!r})")
    return lines


def render(job_plan: PlannedJob, launch: LaunchSettings, requirements: Installed | None,
           base_env: Mapping[str, str], scratch: str) -> str:
    job, settings, plan = job_plan.job, job_plan.settings, job_plan.plan

    def hidden(text: str) -> str:
        return text.replace(scratch, RUN_FOLDER)

    given = job.framework_params
    lines = [f"opentc-train --dry-run: the job in {job.paths.base} (nothing was run, installed or written)", "",
             f"job: {job.job_name or '(no name)'}, host {job.current_host} of {', '.join(job.hosts)}, "
             f"{job.num_gpus} GPU(s), script {job.entry_point}", f"machine: {job.machine.describe()}", "",
             "settings (hyperparameters):"]
    for key, value in settings.values().items():
        source = "from the job" if key in given else "default"
        lines.append(f"  {key} = {as_written(value)} ({source})")
    asked = " and ".join(settings.multi_worker_asked_by)
    lines.append(f"  distribution: {settings.distribution.label}" + (f", asked by {asked}" if asked else ""))
    lines += ["", "launch settings (variables):"]
    for field, variable in LAUNCH_VARIABLES.items():
        source = "from the container" if variable in base_env else "default"
        value = getattr(launch, field)
        lines.append(f"  {variable} = {'one per GPU' if value is None else value} ({source})")
    world = plan.world
    lines += ["", f"world: {world.nodes} host(s) x {world.workers_per_host} worker(s) = {world.size}, "
                  f"rendezvous on {world.master_addr}" + (f", after {', '.join(plan.peers)} resolve"
                                                           if plan.peers else ""),
              f"device: {plan.options.device}, backend: {settings.backend_name}",
              f"compilation cache: {plan.options.compile_cache_dir or 'none'}",
              "installed first: " + (requirements.describe() if requirements else "nothing (no requirements.txt)"),
              "", f"command (in {hidden(plan.command.cwd)}):", "  " + hidden(shlex.join(plan.command.argv)),
              "", "environment, against the container's:",
              *(hidden(line) for line in env_changes(base_env, plan.command.env))]
    if plan.options.debug_mode:   # the worker's own: it sets them in its process, so they are not in the above
        sets, kept = backend_named(plan.options.backend).debug_switches(plan.options.debug_folder(), plan.command.env)
        lines += ["", "debug mode: each worker sets these in its own process before the script (with several "
                      "workers, a file's name gets .rank<N>):",
                  *(hidden(f"  + {name}={short(value)}") for name, value in sorted(sets.items())),
                  *(hidden(f"  = {line}") for line in kept)]
    # What the workers change in the libraries, on the versions the job would run: what requirements.txt installs
    # instead of the image's (pip's resolution) judged by what the ledger knows.
    moves = {change.name: change.after for change in requirements.resolution.changes} if requirements else {}
    lines += ["", f"library changes ({settings.backend_name if settings.enabled else 'compiler off'}: what the "
                  f"workers change in libraries' code, on the versions the job would run; docs/versions.md, "
                  f"\"Library changes\"):",
              *(f"  {line}" for line in library_changes_listing(
                  plan.options, plan.command.env, moves, requirements.name if requirements else "requirements.txt"))]
    return "\n".join(lines)


def dry_run(paths: JobPaths, base_env: Mapping[str, str], out: IO[str] = sys.stdout,
            err: IO[str] = sys.stderr) -> int:
    """Print the job's plan to `out`; bad input to `err`, with the exit code the job would have ended with."""
    scratch = tempfile.mkdtemp(prefix="opentc-dry-run-")
    try:
        try:
            job_plan, launch, requirements = planned(paths, base_env, scratch)
        except JobNotStarted as e:
            print(f"opentc-train --dry-run: the job would not start (exit code {e.exit_code}): {e}", file=err)
            return e.exit_code
        print(render(job_plan, launch, requirements, base_env, scratch), file=out)
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

"""The one interface every compiler backend sits behind.

A backend answers, for the outermost launcher (pure, no torch imported): which device a launch uses, whether
several workers may run on it, and what the workers' environment needs. In each worker it starts a session
(worker_session.WorkerSession): prepared before the script, told after each optimizer step, finished after the
script with the backend's compile report. Generic modules (decision, worker, run, the toolkit's plan) know backends
only through this interface; each backend's own names live in its own module (eager, xla/, inductor/).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from .cuda_driver import driver_problem
from .identity import WorkerIdentity
from .launch_context import LaunchContext
from .options import WorkerOptions
from .patching import LibraryChange
from .published_cache import WorkingCopy
from .script import Program
from .setting_names import Setting
from .worker_session import WorkerSession


class LaunchRefused(Exception):
    """The launch cannot go ahead as configured; the message says why and what is accepted."""


def cuda_or_cpu(requested: str, context: LaunchContext, who: str) -> str:
    """The device for backends that run on torch's own devices: cuda with a GPU visible, else cpu. On cuda, the
    host's driver must support the CUDA torch was built for (cuda_driver)."""
    if requested == "auto":
        requested = "cuda" if context.gpus > 0 else "cpu"
    if requested not in ("cuda", "cpu"):
        raise LaunchRefused(f"device {requested!r} is not accepted for {who}: use cuda or cpu, or auto (cuda when "
                            f"a GPU is visible, else cpu).")
    if requested == "cuda" and context.gpus == 0:
        raise LaunchRefused(no_gpu_message("device cuda", f"{who} on a GPU"))
    host = context.host
    problem = driver_problem(context.env, host.torch_cuda, host.driver_cuda) if requested == "cuda" else None
    if problem:
        raise LaunchRefused(problem)
    return requested


def no_gpu_message(asked: str, what: str) -> str:
    return (f"no GPU visible: {asked} asks for {what}, but this machine (or container) shows no GPU (nvidia-smi "
            f"and NVML find none). Run on a GPU instance type, or locally with `docker run --gpus all` and the "
            f"NVIDIA container toolkit; or let the device be chosen (auto) to train on the CPU.")


@dataclass(frozen=True)
class FollowUp:
    """A command to run after the workers ended (a report rendered from their files): what it makes, and where."""

    argv: tuple[str, ...]
    what: str          # for the log: "tlparse's report of rank0's torch.compile trace"
    product: str       # the file it writes when it succeeds

    def outcome(self, exit_code: int, stderr: str) -> str | None:
        """None when it made its product, else what went wrong, in words."""
        if exit_code == 0 and os.path.isfile(self.product):
            return None
        said = stderr.strip()[-500:]
        return f"exit code {exit_code}{': ' + said if said else ''}"


class CompilerBackend(ABC):
    """What a launch needs to know of one compiler (see the module's docstring)."""

    name: ClassVar[str]
    title: ClassVar[str]          # how the log calls it: "PyTorch/XLA", "torch.compile (TorchInductor)"
    compiles: ClassVar[bool] = True   # False for plain PyTorch (eager): not a compiler a job can choose
    # What this backend turns on by default to cut compile time, by name, each with what it does in a few words; a
    # launch leaves any of them off by name (WorkerOptions.defaults_off).
    optional_defaults: ClassVar[Mapping[str, str]] = MappingProxyType({})
    # The variable of debug mode's that logs what a finding of this backend's points to (setting_names), or None.
    debug_log: ClassVar[Setting | None] = None
    # What its workers change in libraries' code beside what every worker does (the ledger: library_changes.py).
    library_changes: ClassVar[tuple[LibraryChange, ...]] = ()

    def missing(self) -> str | None:
        """What this backend needs that is not installed here, in words (the xla backend in the inductor image), or
        None when it can run."""
        return None

    @abstractmethod
    def decide_device(self, requested: str, context: LaunchContext) -> str:
        """The device every worker uses (`requested` is an option's value, or auto); raises LaunchRefused."""

    def multi_worker_refusal(self, options: WorkerOptions, context: LaunchContext) -> str | None:
        """Why the world's workers cannot run as decided (the message, with what works instead, in the words of the
        front end that started the launch: setting_names), or None."""
        return None

    def unsynchronized_warning(self, options: WorkerOptions, world_size: int) -> str | None:
        """The warning every process prints when the launch runs anyway with a known flaw, or None."""
        return None

    def launch_environment(self, context: LaunchContext) -> dict[str, str]:
        """Variables every worker's environment needs for this backend (a launcher keeps any the user set). Debug
        mode's switches are not among them: the worker option --debug-mode reaches the backend's session, which sets
        them in its own process (start)."""
        return {}

    def debug_switches(self, folder: str, env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
        """Debug mode's variables as a worker whose environment is `env` settles them in its own process (start):
        those it sets (artefacts under `folder`; with several workers a file's name gets `.rank<N>`), and a line for
        each of the user's it keeps. The dry run shows them."""
        return {}, ()

    def cache_copy(self, options: WorkerOptions, env: Mapping[str, str]) -> WorkingCopy | None:
        """The working copy the workers compile in (published_cache), for a backend whose cache must not be written
        in place; None when the workers use the cache folder itself (`env`: the container's environment)."""
        return None

    def follow_ups(self, *, debug: bool, debug_dir: str) -> list[FollowUp]:
        """On the launching host, after the workers ended (however): the commands that make what debug mode leaves
        besides the workers' own files. The launcher runs them under its stop handling and time bound."""
        return []

    def launch_notes(self, options: WorkerOptions, context: LaunchContext) -> list[str]:
        """Lines for the job's log about this launch (`context.env`: the container's environment)."""
        return [f"{self.title} on {options.device} ({context.gpus} GPU(s) on this host)"]

    @abstractmethod
    def start(self, options: WorkerOptions, identity: WorkerIdentity, environ: MutableMapping[str, str],
              program: Program) -> WorkerSession:
        """In the worker, before `program` runs: prepare this process (its own environment included) and return the
        session the worker finishes after the script."""

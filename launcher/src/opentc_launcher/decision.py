"""The one place where a launch's runtime is decided: which device the workers use, and whether several workers
may run on it. Each backend answers for itself (backend.CompilerBackend); this module asks the right one.

The outermost launcher decides, once, from the launch's context (launch_context.LaunchContext: the host it probed,
the world, the environment) and passes the decision down as worker options (`--device cuda --gpu-count 8`,
`--cpu-multi-worker ...`): the toolkit's launch plan for SageMaker jobs, `opentc-run` on its own, or `opentc-worker`
on its own (started by some other launcher, or by hand). A launcher handed a decision (a device and the GPU count it
was decided with) applies it: it neither counts the GPUs nor decides again (host_for, decided_once). One handed a
device but no count (`opentc-worker --device cuda` by hand) is the outermost, and decides: a device it cannot use
(`--device cuda` with no GPU, `--backend inductor --device tpu`) is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .backend import LaunchRefused
from .host import HostFacts, probe_host
from .launch_context import LaunchContext, counted_host
from .options import WorkerOptions
from .registry import backend_named, defaults_off_problem
from .setting_names import DEFAULTS_OFF, setting

__all__ = ["LaunchRefused", "decide", "decided_once", "host_for", "is_decided", "unsynchronized_warning"]


def unsynchronized_warning(options: WorkerOptions, world_size: int) -> str | None:
    """The warning every process prints when a launch runs anyway with a known flaw (several XLA:CPU workers)."""
    return backend_named(options.backend).unsynchronized_warning(options, world_size)


def decide(options: WorkerOptions, context: LaunchContext) -> WorkerOptions:
    """The options every worker of the launch runs with: the device decided, with the GPU count it was decided with,
    and a launch the backend refuses raised as LaunchRefused (several XLA:CPU workers, unless unsynchronised
    replicas were asked for)."""
    backend = backend_named(options.backend)
    missing = backend.missing()
    if missing:
        raise LaunchRefused(f"backend {options.backend} cannot run: {missing}. Use a backend this environment has "
                            f"(inductor, or eager for plain PyTorch), or an image that has {backend.title}.")
    decided = replace(options, device=backend.decide_device(options.device, context), gpu_count=context.gpus)
    refusal = (defaults_off_problem(decided.defaults_off, setting(DEFAULTS_OFF, context.env))
               or backend.multi_worker_refusal(decided, context))
    if refusal:
        raise LaunchRefused(refusal)
    return decided


def is_decided(options: WorkerOptions) -> bool:
    """Whether a launcher above decided these options (a device, and the GPU count it decided with)."""
    return options.device != "auto" and options.gpu_count >= 0


def host_for(options: WorkerOptions, env: Mapping[str, str]) -> HostFacts:
    """The host as the launcher above counted it, when it decided these options; else probed now (this launcher is
    the outermost), once."""
    return counted_host(options.gpu_count) if is_decided(options) else probe_host(env)


def decided_once(options: WorkerOptions, context: LaunchContext) -> WorkerOptions:
    """`options` as a launcher above decided them, or decided here (decide) when none did."""
    return options if is_decided(options) else decide(options, context)

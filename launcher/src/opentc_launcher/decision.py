"""The one place where a launch's runtime is decided: which device the workers use, and whether several workers
may run on it. Each backend answers for itself (backend.CompilerBackend); this module asks the right one.

The outermost launcher decides and passes the decision down as worker options (`--device cuda`,
`--cpu-multi-worker ...`): the toolkit's launch plan for SageMaker jobs, `opentc-run` on its own, or
`opentc-worker` on its own when started by some other launcher with `--device auto`. Deciding again on decided
options returns them unchanged when they can run, so every worker decides again: a launcher handed a decision
applies it, and one handed a device it cannot use (`--device cuda` with no GPU, `--backend inductor --device tpu`)
refuses it as the outermost launcher would have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .backend import LaunchRefused
from .options import WorkerOptions
from .registry import backend_named, defaults_off_problem
from .setting_names import DEFAULTS_OFF, setting

__all__ = ["LaunchRefused", "decide", "unsynchronized_warning"]   # LaunchRefused: what decide raises


def unsynchronized_warning(options: WorkerOptions, world_size: int) -> str | None:
    """The warning every process prints when a launch runs anyway with a known flaw (several XLA:CPU workers)."""
    return backend_named(options.backend).unsynchronized_warning(options, world_size)


def decide(options: WorkerOptions, world_size: int, env: Mapping[str, str], gpu_count: int) -> WorkerOptions:
    """The options every worker of a launch of `world_size` processes runs with: the device decided, and a
    launch the backend refuses raised as LaunchRefused (several XLA:CPU workers, unless unsynchronised replicas
    were asked for)."""
    backend = backend_named(options.backend)
    missing = backend.missing()
    if missing:
        raise LaunchRefused(f"backend {options.backend} cannot run: {missing}. Use a backend this environment has "
                            f"(inductor, or eager for plain PyTorch), or an image that has {backend.title}.")
    decided = replace(options, device=backend.decide_device(options.device, env, gpu_count))
    refusal = (defaults_off_problem(decided.defaults_off, setting(DEFAULTS_OFF, env))
               or backend.multi_worker_refusal(decided, world_size, env))
    if refusal:
        raise LaunchRefused(refusal)
    return decided

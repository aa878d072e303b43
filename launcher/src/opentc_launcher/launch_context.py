"""What a launch is decided by, in one value: the host (probed once: host.HostFacts), the world's size, and the
environment the workers start from (with the front end's names for its settings: setting_names). The outermost
launcher makes it once (the toolkit's plan from the job's machine, `opentc-run` or `opentc-worker` on their own by
probing the host) and every backend decides from it (backend.CompilerBackend); a launcher below gets the decision as
worker options (`--device`, `--gpu-count`) and applies it, never counting or deciding again (decision.host_for and
decided_once)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .host import HostFacts


@dataclass(frozen=True)
class LaunchContext:
    host: HostFacts
    world_size: int
    env: Mapping[str, str]

    @property
    def gpus(self) -> int:
        return self.host.gpus


def counted_host(gpus: int) -> HostFacts:
    """The host as a launcher above counted it (its GPUs, handed down as --gpu-count): nothing is probed again, so what
    else the driver would say is not known here, and not needed: the launch is decided."""
    return HostFacts(cpus=len(os.sched_getaffinity(0)), gpus=gpus)

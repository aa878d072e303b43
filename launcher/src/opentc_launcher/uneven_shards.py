"""A finding when torch's DistributedSampler cannot split the data set evenly among the ranks.

With drop_last=False (its default, and the Trainer's and accelerate's) it evens the ranks out by repeating samples
from the start of the (shuffled) data set, every epoch: those samples weigh twice in the gradient, and an
evaluation counts them twice. The model-parallel guide asks for batches that divide as the sharding needs; this is
where a script's data does not, said once per data set size and world size.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from .patching import OBSERVER, LibraryChange, arm_change
from .replace import replace_once
from .script_findings import ScriptFindings


def finding(samples: int, ranks: int) -> str | None:
    """What DistributedSampler(drop_last=False) does with `samples` over `ranks`, when they do not divide."""
    if ranks <= 1 or samples % ranks == 0:
        return None
    each = -(-samples // ranks)
    return (f"DistributedSampler: the data set's {samples} samples do not divide among the {ranks} ranks, so each "
            f"epoch it repeats {each * ranks - samples} of them to give every rank {each} (drop_last=False): they "
            f"count twice in the gradient and in an evaluation. Pass drop_last=True (the Trainer: "
            f"--dataloader_drop_last), or make the data set's size a multiple of {ranks}.")


class UnevenShardsCheck:
    """Hooks DistributedSampler once torch is imported; what it finds goes to `findings`."""

    def __init__(self, findings: ScriptFindings):
        self.findings = findings
        self._said: set[tuple[int, int]] = set()

    def install(self) -> UnevenShardsCheck:
        arm_change(CHANGE, self._hook)
        return self

    def _hook(self, _torch: ModuleType) -> None:
        from torch.utils.data import distributed

        original = distributed.DistributedSampler.__init__
        check = self._check

        def init_checked(sampler: Any, *args: Any, **kwargs: Any) -> None:
            original(sampler, *args, **kwargs)
            with contextlib.suppress(Exception):   # a data set without len(): nothing to say
                check(len(sampler.dataset), sampler.num_replicas, sampler.drop_last)

        replace_once(distributed.DistributedSampler, "__init__", init_checked)

    def _check(self, samples: int, ranks: int, drop_last: bool) -> None:
        problem = None if drop_last or (samples, ranks) in self._said else finding(samples, ranks)
        if problem:
            self._said.add((samples, ranks))
            self.findings.add(problem)


CHANGE = LibraryChange(
    name="uneven-shards-found", module="torch", target="torch.utils.data.distributed.DistributedSampler.__init__",
    kind=OBSERVER, apply=UnevenShardsCheck._hook,
    why="a finding when DistributedSampler cannot split the data set evenly among the ranks (it repeats samples)",
    unpatched="uneven shards are not found")

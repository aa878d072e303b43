"""What a worker's checks found wrong with the script: logged as a warning when found, kept for the worker's record
(and so the job summary's `findings`)."""

from __future__ import annotations

import logging

log = logging.getLogger("opentc_launcher")


class ScriptFindings:
    def __init__(self, rank: int):
        self.rank = rank
        self.found: list[str] = []

    def add(self, problem: str) -> None:
        self.found.append(problem)
        log.warning("rank %d: %s", self.rank, problem)

"""Why a job did not run to its end; each message says what was wrong and what is accepted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentc_launcher import exit_codes

if TYPE_CHECKING:
    from .supervisor import ProcessResult


class JobConfigError(Exception):
    """The job as configured cannot run; nothing was started."""

    exit_code = exit_codes.BAD_INPUT


class JobStopped(Exception):
    """A stop (SIGTERM) arrived while something other than the workers ran, such as pip."""

    def __init__(self, result: ProcessResult, processes: str, during: str):
        super().__init__(f"{processes} stopped {during}")
        self.result = result
        self.processes = processes
        self.during = during

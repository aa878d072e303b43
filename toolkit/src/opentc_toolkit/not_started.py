"""Why a job did not start: each message says what was wrong and what is accepted, and each kind carries the exit
code the job ends with (opentc_launcher.exit_codes)."""

from __future__ import annotations

from typing import ClassVar

from opentc_launcher.api import exit_codes


class JobNotStarted(Exception):
    """Nothing of the user's ran, for the reason in the message."""

    exit_code: ClassVar[int] = exit_codes.FAILED


class BadInput(JobNotStarted):
    """The job as configured cannot run: a job file, hyperparameter, variable, requirement or launch."""

    exit_code = exit_codes.BAD_INPUT


class CodeNotFetched(JobNotStarted):
    """The job's code could not be fetched for a reason that is not the job's (an outage, a full disk)."""

    exit_code = exit_codes.FAILED


class RequirementsFailed(JobNotStarted):
    """requirements.txt did not install (pip's own words in the message)."""

    exit_code = exit_codes.FAILED


class PeersUnreachable(JobNotStarted):
    """The hosts of a multi-host job never met (a name that does not resolve, a rendezvous that never answers)."""

    exit_code = exit_codes.PEERS_UNREACHABLE

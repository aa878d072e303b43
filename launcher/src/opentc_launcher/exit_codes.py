"""Every exit code the project's commands use (`train`, `opentc-train`, `opentc-run`, `opentc-worker`).

The table "Exit codes" in docs/failures-and-exit-codes.md is checked against `TABLE` by a test, so the two cannot
drift apart.
"""

from __future__ import annotations

import signal

OK = 0
# The training script failed (the code Python gives an uncaught exception; a script's own sys.exit(N) keeps
# its N), requirements.txt could not be installed, the code could not be fetched (an outage), or the toolkit failed.
FAILED = 1
# Bad input: the job, a hyperparameter, an environment variable or the launch as configured cannot run.
# Nothing was started; output/failure names the input and what is accepted.
BAD_INPUT = 2
# A multi-host job's hosts never met: a name did not resolve, or the rendezvous timed out.
PEERS_UNREACHABLE = 3
# A worker compiled more graphs than its limit allows (--max-compilations).
COMPILATION_LIMIT = 4
# A death by signal N, or a job stopped by signal N: 128 + N (137 = SIGKILL, 143 = SIGTERM), as shells report it.
SIGNAL_BASE = 128

TABLE = {
    OK: "success",
    FAILED: "the training script failed (or its own sys.exit code), requirements.txt did not install, the code "
            "could not be fetched for a reason that is not the job's (an outage), or the toolkit failed",
    BAD_INPUT: "bad input: nothing was started (a job file, hyperparameter, environment variable, requirement "
               "or launch that cannot run)",
    PEERS_UNREACHABLE: "the hosts of a multi-host job never met (name resolution or rendezvous)",
    COMPILATION_LIMIT: "compilation limit reached (a worker compiled more graphs than its limit allows)",
    SIGNAL_BASE: "128 + N: killed by, or stopped on, signal N (137 = SIGKILL, often out of memory; "
                 "143 = SIGTERM, a stop)",
}


def of_signal(signum: int) -> int:
    return SIGNAL_BASE + int(signum)


def from_returncode(returncode: int) -> int:
    """A shell-style exit code from subprocess's returncode: a death by signal N (-N) becomes 128 + N."""
    return of_signal(-returncode) if returncode < 0 else returncode


def signal_name(exit_code: int) -> str | None:
    """SIGKILL for 137, and so on; None for an exit code that is not 128 + a signal."""
    if exit_code > SIGNAL_BASE:
        try:
            return signal.Signals(exit_code - SIGNAL_BASE).name
        except ValueError:
            return None
    return None

"""How a job ended, told the way SageMaker reads it: output/failure (its first 1024 characters become
the job's FailureReason) or output/success, a log line, and an exit code."""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass
from typing import Optional

from opentc_launcher.errors import FailureRecord, read_error_file, signal_name, tail

from .supervisor import ProcessResult

log = logging.getLogger(__name__)

FAILURE_REASON_CHARS = 1024
SUMMARY_CHARS = 600


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    message: str = ""   # empty on success

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0


def _describe_exit(code: int) -> str:
    name = signal_name(code)
    if name is None:
        return f"exit code {code}"
    hint = "; on SageMaker this usually means the instance ran out of memory" if name == "SIGKILL" else ""
    return f"exit code {code}, i.e. killed by {name}{hint}"


def compose(headline: str, summary: str = "", details: str = "") -> str:
    """Headline and the error's own words first (they are what FailureReason shows), details after."""
    text = headline.strip()
    if summary.strip():
        short = summary.strip()
        if len(short) > SUMMARY_CHARS:
            short = short[:SUMMARY_CHARS] + " ..."
        text += "\n" + short
    if details.strip():
        text += "\n\n" + details.strip() + "\n"
    return text


def failure_from_result(result: ProcessResult, record: Optional[FailureRecord], host: str,
                        world_size: int) -> Outcome:
    code = result.exit_code
    if result.stopped_by is not None:
        name = signal.Signals(result.stopped_by).name
        how = ("the workers ended within the grace period" if code != 128 + signal.SIGKILL
               else "the workers were killed with SIGKILL")
        return Outcome(128 + result.stopped_by, compose(
            f"Training stopped: {name} received (StopTrainingJob, a spot interruption, MaxRuntime or "
            f"docker stop); the workers were given {result.grace:g} s to finish and {how} ({_describe_exit(code)}).",
            record.summary if record else ""))
    where = f"on host {host}"
    if record is not None and record.rank is not None and world_size > 1:
        where = f"on rank {record.rank} of {world_size}, host {host}"
    summary = record.summary if record else ""
    details = (record.traceback or record.stderr_tail) if record else ""
    details = details or tail(result.stderr_tail)
    return Outcome(code, compose(f"Training failed: the training script ended with {_describe_exit(code)} {where}.",
                                 summary, details))


def single_worker_record(result: ProcessResult, error_file: str) -> FailureRecord:
    summary, traceback_text = read_error_file(error_file)
    return FailureRecord(exit_code=result.exit_code, rank=0, summary=summary,
                         traceback=tail(traceback_text), stderr_tail=tail(result.stderr_tail))


def launcher_record(report_path: str) -> Optional[FailureRecord]:
    try:
        with open(report_path, encoding="utf-8") as f:
            return FailureRecord.from_json(f.read())
    except (OSError, ValueError, TypeError):
        return None


def clear_stale_outcome(output_dir: str) -> None:
    """A job folder re-used locally may hold the last run's verdict; SageMaker's never does."""
    for name in ("failure", "success"):
        path = os.path.join(output_dir, name)
        if os.path.exists(path):
            log.info("removing %s from an earlier run", path)
            os.remove(path)


def write_failure(output_dir: str, outcome: Outcome) -> str:
    """Write output/failure unless something already did (the first writer's reason is the real one)."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "failure")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(outcome.message)
    # sagemaker-training's trainer logs "Reporting training FAILURE" next.
    log.error("%s", outcome.message[:FAILURE_REASON_CHARS])
    return path

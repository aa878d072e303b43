"""How a job ended, told the way SageMaker reads it: output/failure (its first 1024 characters become the
job's FailureReason) or output/success, a log line, and an exit code."""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import sys
from dataclasses import dataclass

from opentc_launcher.api import LAUNCH, FailureRecord, exit_codes, read_error_file
from opentc_launcher.common import printable, tail

from .job import JobPaths
from .supervisor import ProcessResult

log = logging.getLogger(__name__)

FAILURE_REASON_CHARS = 1024
SUMMARY_CHARS = 600


class OutcomeKind(enum.Enum):
    """How a job ended; the value is the code the job summary keeps (opentc_compare.summary.OUTCOME_KINDS, with
    the words opentc-compare shows for it; tests/test_rules.py holds the two to the same codes)."""

    SUCCEEDED = "succeeded"
    NOT_STARTED = "not_started"        # bad input, requirements that did not install, hosts that never met
    LAUNCH_FAILED = "launch_failed"    # the launcher failed before any training script ran
    SCRIPT_FAILED = "script_failed"    # a training script ended with an error
    STOPPED = "stopped"                # a stop (StopTrainingJob, a spot interruption, MaxRuntime, docker stop)
    TOOLKIT_FAILED = "toolkit_failed"  # the toolkit's own fault


@dataclass(frozen=True)
class Outcome:
    """How the job ended, as facts; rendered to text (`message`) only where it is written: output/failure, the log,
    the job summary's headline."""

    exit_code: int
    kind: OutcomeKind = OutcomeKind.SUCCEEDED
    headline: str = ""      # one sentence: what happened, where
    summary: str = ""       # the error's own words (the failed worker's, pip's, ...)
    details: str = ""       # its traceback or the end of its stderr
    rank: int | None = None          # the failed worker, where one failed and its rank is known
    host: str | None = None          # the host it failed on
    hosts_never_met: bool = False    # a multi-host job whose hosts never met: no other host has a verdict to wait for

    @property
    def succeeded(self) -> bool:
        return self.exit_code == exit_codes.OK

    @property
    def stopped(self) -> bool:
        """A stop ended it (stop_outcome), not a failure of its own."""
        return self.kind is OutcomeKind.STOPPED

    @property
    def message(self) -> str:
        """The failure's text as output/failure starts it (empty on success)."""
        return failure_message(self.headline, self.summary, self.details) if self.headline else ""


def describe_exit(code: int) -> str:
    name = exit_codes.signal_name(code)
    if name is None:
        return f"exit code {code}"
    hint = "; on SageMaker this usually means the instance ran out of memory" if name == "SIGKILL" else ""
    return f"exit code {code}, i.e. killed by {name}{hint}"


def last_lines(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The end of some output, whole lines only, at most `limit` characters: where an error says what it is."""
    kept: list[str] = []
    size = 0
    for line in reversed([line.rstrip() for line in text.strip().splitlines() if line.strip()]):
        if kept and size + len(line) + 1 > limit:
            break
        kept.append(line[-limit:])
        size += len(line) + 1
    return "\n".join(reversed(kept))


def failure_message(headline: str, summary: str = "", details: str = "") -> str:
    """Headline and the error's own words first (they are what FailureReason shows), details after. Whatever
    cannot be written as UTF-8 (a lone surrogate from a file name) comes out escaped."""
    headline, summary, details = printable(headline), printable(summary), printable(details)
    text = headline.strip()
    if summary.strip():
        short = summary.strip()
        if len(short) > SUMMARY_CHARS:
            short = short[:SUMMARY_CHARS] + " ..."
        text += "\n" + short
    if details.strip():
        text += "\n\n" + details.strip() + "\n"
    return text


def not_started(reason: str, exit_code: int = exit_codes.BAD_INPUT) -> Outcome:
    return Outcome(exit_code, OutcomeKind.NOT_STARTED, f"Training not started: {reason}")


# What usually sends each signal that stops a job.
STOP_CAUSES = {
    signal.SIGTERM: "StopTrainingJob, a spot interruption, MaxRuntime or docker stop",
    signal.SIGINT: "Ctrl-C",
    signal.SIGHUP: "the terminal or ssh session that ran train closed",
}


def _stop_received(signum: int, when: str) -> str:
    """The first words of every stop's verdict: the signal, when it came, and what usually sends it."""
    stop = signal.Signals(signum)
    return f"Training stopped: {stop.name} received{' ' + when if when else ''} ({STOP_CAUSES.get(stop, 'a signal')})"


def stop_outcome(result: ProcessResult, processes: str = "the workers", during: str = "", summary: str = "") -> Outcome:
    """A stop (StopTrainingJob, a spot interruption, MaxRuntime, docker stop, a closed terminal) and how the
    processes took it."""
    assert result.stopped_by is not None
    were = "were" if processes.endswith("s") else "was"
    how = (f"{processes} ended within the grace period" if result.exit_code != exit_codes.of_signal(signal.SIGKILL)
           else f"{processes} {were} killed with SIGKILL")
    return Outcome(exit_codes.of_signal(result.stopped_by), OutcomeKind.STOPPED,
                   f"{_stop_received(result.stopped_by, during)}; {processes} {were} given"
                   f" {result.grace:g} s to finish and {how} ({describe_exit(result.exit_code)}).", summary)


def stopped_before_the_script(signum: int, during: str) -> Outcome:
    """A stop that arrived before anything of the user's ran, while the toolkit itself was busy (`during`)."""
    return Outcome(exit_codes.of_signal(signum), OutcomeKind.STOPPED,
                   f"{_stop_received(signum, during)}, before any training script ran.")


def stopped_after_the_workers(signum: int, during: str, cut_short: bool = True) -> Outcome:
    """A stop that arrived once the training script had ended with exit code 0, while the job was finishing (debug
    mode's reports, the cache), or after (`cut_short` false: what it was doing had finished): the platform asked for
    the job to end before it was done, so it ends as stopped."""
    kept = ("What the script wrote is kept; what was being done then was cut short." if cut_short else
            "What the script wrote is kept, and so is what was done after it.")
    return Outcome(exit_codes.of_signal(signum), OutcomeKind.STOPPED,
                   f"{_stop_received(signum, f'after the training script had ended with exit code 0, {during}')}. "
                   f"{kept}")


# -- where the failed worker's own account is -------------------------------------------------------------
@dataclass(frozen=True)
class WorkerErrorFile:
    """One worker, run directly: it writes its error record here (torch.distributed.elastic's format)."""

    path: str

    def read(self, result: ProcessResult) -> FailureRecord:
        summary, traceback_text = read_error_file(self.path)
        return FailureRecord(exit_code=result.exit_code, rank=0, summary=summary,
                             traceback=tail(traceback_text), stderr_tail=tail(result.stderr_tail))


@dataclass(frozen=True)
class LauncherFailureReport:
    """Workers run by opentc-run: it reports the one that failed here (--failure-report)."""

    path: str

    def read(self, result: ProcessResult) -> FailureRecord | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                return FailureRecord.from_json(f.read())
        except (OSError, ValueError, TypeError):
            return None


FailureSource = WorkerErrorFile | LauncherFailureReport


def judge(result: ProcessResult, source: FailureSource, host: str, world_size: int) -> Outcome:
    """The outcome of the workers' run: success, a stop, or the failure in the failed worker's words."""
    record = None if result.exit_code == exit_codes.OK and result.stopped_by is None else source.read(result)
    if result.stopped_by is not None:
        return stop_outcome(result, summary=record.summary if record else "")
    if result.exit_code == exit_codes.OK:
        return Outcome(exit_codes.OK)
    code = result.exit_code
    if record is not None and record.stage == LAUNCH:   # the launcher itself failed: no script ran
        if code == exit_codes.BAD_INPUT:
            return not_started(record.summary, code)
        return Outcome(code, OutcomeKind.LAUNCH_FAILED,
                       f"Training failed before any training script ran: the launcher ended with "
                       f"{describe_exit(code)} on host {host}.", record.summary, record.stderr_tail, host=host,
                       hosts_never_met=code == exit_codes.PEERS_UNREACHABLE)   # the rendezvous never completed
    where = f"on host {host}"
    if record is not None and record.rank is not None and world_size > 1:
        where = f"on rank {record.rank} of {world_size}, host {host}"
    stderr = (record.stderr_tail if record else "") or tail(result.stderr_tail)
    # No error record (a crash in native code, a kill, a script that printed and exited): the end of its
    # stderr says what happened, so that goes first.
    summary = (record.summary if record else "") or last_lines(stderr)
    details = (record.traceback if record else "") or stderr
    rank = record.rank if record is not None and record.rank is not None else (0 if world_size == 1 else None)
    return Outcome(code, OutcomeKind.SCRIPT_FAILED,
                   f"Training failed: the training script ended with {describe_exit(code)} {where}.", summary,
                   details, rank=rank, host=host)


# -- output/success and output/failure -----------------------------------------------------------------
def _say_on_stderr(message: str) -> None:
    with contextlib.suppress(OSError):
        print(f"opentc: {message}", file=sys.stderr, flush=True)


def clear_verdict(paths: JobPaths) -> None:
    """No verdict left from an earlier run (a job folder re-used locally; SageMaker's never has one)."""
    for path in (paths.failure_file, paths.success_file):
        if os.path.lexists(path):
            try:
                os.remove(path)
                log.info("removed %s from an earlier run", path)
            except OSError as e:
                log.error("cannot remove %s from an earlier run: %s", path, e)


def _write_new(path: str, text: str) -> bool:
    """Write `text` to a file that does not exist yet; on any error leave nothing half-written behind."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return True   # the first writer's reason is the real one
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
        return True
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(path)
        raise


USER_VERDICT_CHARS = 65536


def _take_script_verdict(path: str) -> str | None:
    """The text of a verdict file the script wrote itself (None if there is none), removed so that exactly one
    verdict is left; its words go into the one that stays."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(USER_VERDICT_CHARS)
        os.remove(path)
    except OSError as e:
        log.error("cannot remove %s, which the training script wrote: %s", path, e)
        return None
    return text


def _with_script_verdict(paths: JobPaths, outcome: Outcome) -> str:
    """The verdict file's text: the toolkit's, with the words of a verdict of the other kind that the script wrote
    itself (output/failure on a job that exited 0, output/success on one that failed)."""
    if outcome.succeeded:
        words = _take_script_verdict(paths.failure_file)
        if words is None:
            return ""
        log.warning("the training script wrote %s but exited 0: the job succeeded (its exit code decides); what it "
                    "wrote is kept in %s", paths.failure_file, paths.success_file)
        return ("The training script exited 0, so the job succeeded, but it had written output/failure; what it "
                f"wrote:\n{words}")
    words = _take_script_verdict(paths.success_file)
    if words is None:
        return outcome.message
    log.warning("the training script wrote %s but then failed: the job failed; %s says so", paths.success_file,
                paths.failure_file)
    if not words.strip():
        return outcome.message
    return f"{outcome.message.rstrip()}\n\nThe training script had written output/success before it failed:\n{words}"


def report(paths: JobPaths, outcome: Outcome) -> None:
    """output/success or output/failure (exactly one of them), and the log lines SageMaker users and AWS's tests
    look for. When the verdict cannot be written, stderr says why (the exit code still tells the truth)."""
    path = paths.success_file if outcome.succeeded else paths.failure_file
    try:
        os.makedirs(paths.output, exist_ok=True)
        _write_new(path, printable(_with_script_verdict(paths, outcome)))
    except OSError as e:
        _say_on_stderr(f"could not write {path}: {type(e).__name__}: {e}. The job's verdict is in this log "
                       f"and in the exit code ({outcome.exit_code}).")
    if outcome.succeeded:
        log.info("Reporting training SUCCESS")
    else:
        log.error("Reporting training FAILURE")
        log.error("%s", outcome.message[:FAILURE_REASON_CHARS])

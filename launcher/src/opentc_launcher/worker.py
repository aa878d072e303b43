"""The bootstrap every worker runs: `opentc-worker [options] script.py [args...]`.

It starts the backend's session (PyTorch/XLA, TorchInductor, or plain PyTorch; torch_xla is imported by the
xla backend only), runs the script as `__main__`, finishes the session (its compile report), and turns however
the script ended into an exit code and, on failure, an error record at $TORCHELASTIC_ERROR_FILE (where torchrun
and opentc-run look for it).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import traceback
from types import TracebackType
from typing import NoReturn

from . import exit_codes
from .compiler_env import compiler_environment
from .decision import LaunchRefused, decided_once, host_for, unsynchronized_warning
from .env_values import BadEnvironmentValue
from .failure_records import missing_library, record_error, summarize_exception
from .identity import WorkerIdentity
from .launch_context import LaunchContext
from .library_changes import patches_off_line
from .option_folders import folder_problem
from .options import WorkerOptions, add_worker_arguments
from .process import (
    StoppedWithExitCode,
    Terminated,
    configure_logging,
    die_with_parent,
    exit_code_of,
    raise_terminated_on_stop,
)
from .registry import BACKEND_DEFAULTS, backend_named
from .script import Program, run_module, run_script, why_not_a_script

log = logging.getLogger("opentc_launcher")



def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: the script's own arguments follow ours, and argparse would read `--compile` (the script's)
    # as an ambiguous abbreviation of --compile-report-dir / --compile-cache-dir and stop.
    parser = argparse.ArgumentParser(
        prog="opentc-worker", allow_abbrev=False,
        description="Run a training script in this process after preparing its compiler backend.")
    add_worker_arguments(parser, BACKEND_DEFAULTS)
    parser.add_argument("--module", "-m", action="store_true", help="the script is a module name, as python -m")
    parser.add_argument("script", help="the training script (or module with --module)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def follow_parent() -> None:
    """Die with the launcher that started this worker (process.die_with_parent), including when it died before the
    signal was armed."""
    parent = os.getppid()
    if die_with_parent() and os.getppid() != parent:
        os._exit(exit_codes.of_signal(signal.SIGKILL))


_LAUNCHER_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the first frame that is not the launcher's or runpy's, as `python script.py` shows."""
    first = tb
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not (filename.startswith(_LAUNCHER_DIR) or filename.startswith("<frozen runpy>")
                or os.path.basename(filename) == "runpy.py"):
            return tb
        tb = tb.tb_next
    return first


def format_failure(exc: BaseException) -> str:
    """The traceback `python script.py` would print: the user's frames only. A SyntaxError in the script
    has none (it was raised while compiling it): its file, line and caret are the whole story."""
    if isinstance(exc, SyntaxError) and _user_frames(exc.__traceback__) is exc.__traceback__:
        return "".join(traceback.format_exception_only(type(exc), exc))
    return "".join(traceback.format_exception(type(exc), exc, _user_frames(exc.__traceback__)))


def record_failure(exc: BaseException, exit_code: int) -> None:
    """Print what Python would print, and write the error record for the launcher."""
    if isinstance(exc, SystemExit):
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        summary, tb = f"the script called sys.exit({exc.code!r})", ""
    elif isinstance(exc, Terminated):
        summary, tb = f"the script was {exc}", ""
    elif isinstance(exc, StoppedWithExitCode):
        summary, tb = exc.summary, ""
    else:
        tb = format_failure(exc)
        sys.stderr.write(tb)
        hint = missing_library(exc)
        if hint:
            log.error("%s", hint)
        summary = summarize_exception(exc)
    record_error(summary, tb, exit_code)


def refuse(message: str) -> NoReturn:
    log.error("%s", message)
    record_error(message, "", exit_codes.BAD_INPUT)
    sys.exit(exit_codes.BAD_INPUT)


def main(argv: list[str] | None = None) -> NoReturn:
    configure_logging()
    args = build_parser().parse_args(argv)
    follow_parent()
    options = WorkerOptions.from_namespace(args)
    problem = None if args.module else why_not_a_script(args.script)
    if problem:
        refuse(f"training script {args.script} {problem}")
    backend = backend_named(options.backend)
    try:
        identity = WorkerIdentity.from_env(os.environ)
        # Started by a launcher of ours, the launch is decided (--device, --gpu-count): applied as it is. Started on
        # its own (torchrun, by hand), this worker is the outermost launcher: it probes the host and decides.
        context = LaunchContext(host_for(options, os.environ), identity.world_size, os.environ)
        options = decided_once(options, context)
        unusable = folder_problem(options)
        if unusable:
            refuse(unusable)
        warning = unsynchronized_warning(options, identity.world_size)
        if warning:
            log.warning("rank %d: %s", identity.rank, warning)
        program = Program(args.script, tuple(args.script_args), module=args.module)
        # What the backend needs in this process's environment that no launcher above set: opentc-run and
        # opentc-worker on their own (train's plan set it all). Before the backend imports its runtime, which reads
        # it; debug mode's switches are the session's own (backend.start).
        own = compiler_environment(options, context)
        if own.applied and identity.rank == 0:
            log.info("rank0: the %s environment this worker sets for itself (a launcher above set none of it): %s",
                     backend.title, " ".join(f"{k}={v}" for k, v in sorted(own.applied.items())))
        os.environ.update(own.applied)
        if not options.library_patches and identity.rank == 0:
            log.info("rank0: %s", patches_off_line(options, os.environ))
        session = backend.start(options, identity, os.environ, program)
    except (LaunchRefused, BadEnvironmentValue) as e:
        refuse(str(e))
    except Exception as e:  # noqa: BLE001  (torch_xla missing or broken, a runtime that does not start)
        log.error("%s could not be prepared, so the script did not start", backend.title)
        record_failure(e, exit_codes.FAILED)
        sys.exit(exit_codes.FAILED)

    raise_terminated_on_stop()
    exit_code = exit_codes.OK
    try:
        if args.module:
            run_module(args.script, args.script_args)
        else:
            run_script(args.script, args.script_args, identity.local_rank)
    except BaseException as exc:  # noqa: BLE001  (the script's end, whatever it was)
        exit_code = exit_code_of(exc)
        if exit_code != exit_codes.OK:
            record_failure(exc, exit_code)
    try:
        session.finish(exit_code)
    except Exception as e:  # noqa: BLE001  (the report and the measurements never change what the script did)
        log.warning("the compile report and this worker's measurements could not be made: %s: %s",
                    type(e).__name__, e)
    sys.exit(exit_code)


if __name__ == "__main__":
    main()

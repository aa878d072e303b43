"""The bootstrap every worker runs: `python -m opentc_launcher.worker [options] script.py [args...]`.

It prepares the runtime (PyTorch/XLA, or plain PyTorch with torch_xla untouched), runs the script as
`__main__`, and turns however the script ended into an exit code and, on failure, an error record at
$TORCHELASTIC_ERROR_FILE (where torchrun and opentc-run look for it).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import traceback
from typing import NoReturn, Optional

from .errors import write_error_file
from .options import WorkerOptions, add_worker_arguments
from .runtime import LaunchRefused, WorkerIdentity
from .script import run_module, run_script

log = logging.getLogger("opentc_launcher")

EXIT_LAUNCH_REFUSED = 2


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM so the script's `finally` blocks and context managers run.

    A BaseException, so a script's `except Exception` does not swallow it.
    """

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _raise_terminated(signum, _frame):
    raise Terminated(signum)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m opentc_launcher.worker",
        description="Run a training script in this process after preparing PyTorch/XLA.")
    add_worker_arguments(parser)
    parser.add_argument("--module", "-m", action="store_true", help="the script is a module name, as python -m")
    parser.add_argument("script", help="the training script (or module with --module)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def configure_logging() -> None:
    if not logging.getLogger().handlers and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[opentc-launcher] %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def exit_code_of(exc: BaseException) -> int:
    """The exit code Python itself would give for an exception that ended the script."""
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        return 1  # a message: Python prints it and exits 1
    if isinstance(exc, Terminated):
        return 128 + exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return 128 + signal.SIGINT
    return 1


_LAUNCHER_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_frames(tb):
    """The traceback from the first frame that is not the launcher's or runpy's, as `python script.py` shows."""
    first = tb
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not (filename.startswith(_LAUNCHER_DIR) or filename.startswith("<frozen runpy>")
                or os.path.basename(filename) == "runpy.py"):
            return tb
        tb = tb.tb_next
    return first


def record_failure(exc: BaseException, exit_code: int) -> None:
    """Print what Python would print, and write the error record for the launcher."""
    if isinstance(exc, SystemExit):
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        summary, tb = f"the script called sys.exit({exc.code!r})", ""
    elif isinstance(exc, Terminated):
        summary, tb = f"the script was {exc}", ""
    else:
        tb = "".join(traceback.format_exception(type(exc), exc, _user_frames(exc.__traceback__)))
        sys.stderr.write(tb)
        summary = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        write_error_file(error_file, summary=summary, traceback_text=tb, exit_code=exit_code)


def refuse(message: str) -> NoReturn:
    log.error("%s", message)
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        write_error_file(error_file, summary=message, traceback_text="", exit_code=EXIT_LAUNCH_REFUSED)
    sys.exit(EXIT_LAUNCH_REFUSED)


def main(argv: Optional[list[str]] = None) -> NoReturn:
    configure_logging()
    args = build_parser().parse_args(argv)
    options = WorkerOptions.from_namespace(args)
    if not args.module and not os.path.isfile(args.script):
        refuse(f"training script not found: {args.script}")
    try:
        identity = WorkerIdentity.from_env(os.environ)
        session = None
        if options.runtime == "xla":
            from .xla_session import XlaSession

            session = XlaSession.start(options, identity, os.environ)
    except LaunchRefused as e:
        refuse(str(e))
    except Exception as e:  # torch_xla missing or broken, a runtime that does not start
        log.error("PyTorch/XLA could not be prepared, so the script did not start")
        record_failure(e, 1)
        sys.exit(1)

    # Only if the user's environment did not already decide what SIGTERM does.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
    exit_code = 0
    try:
        if args.module:
            run_module(args.script, args.script_args)
        else:
            run_script(args.script, args.script_args, identity.local_rank)
    except BaseException as exc:  # noqa: B902  (the script's end, whatever it was)
        exit_code = exit_code_of(exc)
        if exit_code != 0:
            record_failure(exc, exit_code)
    if session is not None:
        exit_code = session.finish(exit_code) or exit_code
    sys.exit(exit_code)


if __name__ == "__main__":
    main()

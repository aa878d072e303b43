"""`opentc-run`: torchrun for compiled PyTorch (PyTorch/XLA or TorchInductor).

    opentc-run --standalone --nproc-per-node 8 train.py --epochs 3
    opentc-run --nnodes 2 --node-rank 0 --master-addr algo-1 --master-port 29500 --nproc-per-node 8 train.py

It takes every torchrun option (and the PET_* / standard variables torchrun honours), runs each worker
under `opentc-worker`, and, when a worker fails, exits with that worker's exit code (a death by signal N
gives 128 + N) instead of torchrun's blanket 1. `--failure-report FILE` also writes the failure as JSON for
a supervisor.
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from . import exit_codes
from .after_workers import AfterWorkers
from .commands import AFTER_WORKERS_BY_CALLER, CACHE_COPY_OPENED, DEFAULT_MASTER_PORT, worker_command
from .decision import LaunchRefused, decided_once, host_for, unsynchronized_warning
from .env_values import MAX_PORT, BadEnvironmentValue, number_from_env
from .failure_records import LAUNCH, FailureRecord, read_error_file
from .files import write_atomically
from .launch_checks import (
    WATCHDOG_MARGIN,
    RendezvousWatchdog,
    classify_launch_error,
    option_problem,
    rendezvous_timeout,
)
from .launch_context import LaunchContext
from .library_changes import listing as library_changes_listing
from .option_folders import folder_problem
from .options import WorkerOptions, add_worker_arguments
from .process import configure_logging
from .published_cache import WorkingCopy
from .registry import BACKEND_DEFAULTS
from .text import tail
from .working_cache import own_working_copy

log = logging.getLogger("opentc_launcher")


# Standard variables (Kubernetes operators, batch schedulers, torchrun's own docs) used as defaults when
# neither the option nor torchrun's PET_* variable gives a value.
STANDARD_VARIABLES = {"master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT", "node_rank": "NODE_RANK"}


@dataclass(frozen=True)
class FromVariable:
    """A default taken from a standard variable, checked and converted after parsing (resolve_standard_variables),
    so that a bad value is named by its variable."""

    variable: str
    text: str


def build_parser(env: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.allow_abbrev = False   # the script's own arguments follow ours (see opentc_launcher.worker)
    for dest, variable in STANDARD_VARIABLES.items():
        if f"PET_{dest.upper()}" not in env and env.get(variable, "").strip():
            # Not a string, so argparse does not convert it: a bad value reaches resolve_standard_variables.
            parser.set_defaults(**{dest: FromVariable(variable, env[variable].strip())})
    parser.prog = "opentc-run"
    parser.description = ("Launch a training script on its compiler backend (PyTorch/XLA, TorchInductor, or "
                          "none), one worker per device, with torchrun's options.")
    add_worker_arguments(parser, BACKEND_DEFAULTS)
    parser.add_argument("--dry-run", action="store_true",
                        help="decide the launch and print it (the workers' options, and the library changes they "
                             "would make on the versions installed here) and exit: nothing is started or written")
    parser.add_argument("--failure-report", default="", metavar="FILE",
                        help="when a worker fails, write the failure (rank, exit code, error) to FILE as JSON")
    parser.add_argument(CACHE_COPY_OPENED, action="store_true",
                        help="the program that starts opentc-run opened the working copy of the cache in "
                             "--compile-cache-work-dir and publishes it (the SageMaker toolkit does); without it, "
                             "opentc-run opens and publishes the copy itself")
    parser.add_argument(AFTER_WORKERS_BY_CALLER, action="store_true",
                        help="the program that starts opentc-run does what follows the workers (debug mode's reports, "
                             "the cache's publication: the SageMaker toolkit does, within its own bound); without it, "
                             "opentc-run does it after its workers")
    return parser


def resolve_standard_variables(args: argparse.Namespace) -> str | None:
    """Replace the defaults that came from MASTER_ADDR, MASTER_PORT and NODE_RANK by their values; the first one
    that is not accepted, in words, or None."""
    for dest in STANDARD_VARIABLES:
        value = getattr(args, dest)
        if not isinstance(value, FromVariable):
            continue
        if dest == "master_addr":
            setattr(args, dest, value.text)
            continue
        low, high = (1, MAX_PORT) if dest == "master_port" else (0, None)
        try:
            setattr(args, dest, number_from_env({value.variable: value.text}, value.variable, int, None,
                                                minimum=low, maximum=high))
        except BadEnvironmentValue as e:
            return str(e)
    return None


def apply_standalone(args: argparse.Namespace) -> None:
    """What torchrun's own run() does for --standalone (config_from_args does not): a local rendezvous on a
    free port with a fresh id, so two single-host launches on one machine never meet or collide. Unlike
    torchrun, the workers meet on 127.0.0.1, not on this host's name: a container without a network
    (docker run --network none) cannot resolve its own name."""
    if args.standalone:
        args.rdzv_backend = "c10d"
        args.rdzv_endpoint = "127.0.0.1:0"
        args.rdzv_id = str(uuid.uuid4())
        args.local_addr = args.local_addr or "127.0.0.1"


def _stderr_tail(log_dir: str, local_rank: int, error_file: str) -> str:
    """The end of a failed worker's stderr, which torchrun's --tee kept under log_dir."""
    candidates = []
    if error_file and os.path.isabs(error_file):
        candidates.append(os.path.join(os.path.dirname(error_file), "stderr.log"))
    candidates += sorted(glob.glob(os.path.join(log_dir, "**", "attempt_*", str(local_rank), "stderr.log"),
                                   recursive=True))
    for path in candidates:
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                return tail(f.read())
    return ""


def failure_from_child_failed(error: Any, log_dir: str) -> FailureRecord:
    rank, failure = error.get_first_failure()
    summary, traceback_text = read_error_file(failure.error_file)
    exit_code = exit_codes.from_returncode(failure.exitcode)
    if not summary and failure.exitcode < 0:
        summary = f"worker killed by signal {failure.signal_name()}"
    return FailureRecord(
        exit_code=exit_code,
        rank=rank,
        summary=summary,
        traceback=tail(traceback_text),
        stderr_tail=_stderr_tail(log_dir, failure.local_rank, failure.error_file),
    )


def write_failure_report(path: str, record: FailureRecord) -> None:
    if path:
        write_atomically(path, record.to_json())


def _report_launch_failure(args: argparse.Namespace, exit_code: int, message: str) -> None:
    log.error("%s", message)
    write_failure_report(args.failure_report, FailureRecord(exit_code=exit_code, summary=message, stage=LAUNCH))


def _fail(args: argparse.Namespace, exit_code: int, message: str) -> NoReturn:
    """The launch failed before any training script ran."""
    _report_launch_failure(args, exit_code, message)
    sys.exit(exit_code)


@dataclass(frozen=True)
class RunConfig:
    """One launch, decided before anything starts: torchrun's arguments, rewritten to run every worker under
    opentc-worker with `options` (as torch.distributed.run's config_from_args takes them), and what messages name."""

    args: argparse.Namespace
    options: WorkerOptions
    log_dir: str        # each worker's output, kept by torchrun's --tee; the working copy of the cache when ours
    endpoint: str       # the rendezvous, for messages
    node: str           # "node rank N of M", for messages
    owns_log_dir: bool = False   # made here (no --log-dir): removed when the launch ends, its stderr copies read


def configure(argv: list[str] | None = None) -> RunConfig:
    """Parse and check opentc-run's command line and decide the launch (the device, the workers' options), once,
    before any process starts; a launch that cannot go ahead ends here (exit code 2, with the failure report)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.no_python or args.run_path:
        parser.error("--no-python and --run-path are not supported: every worker runs the script "
                     "under its backend's bootstrap (opentc-worker)")
    from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

    requested = WorkerOptions.from_namespace(args)
    host = host_for(requested, os.environ)   # as a launcher above counted it, else probed once, here
    if args.master_port is None:   # torch >= 2.8 leaves it unset for run() to fill in; config_from_args needs it
        args.master_port = DEFAULT_MASTER_PORT
    problem = resolve_standard_variables(args) or option_problem(args, host.gpus)
    if problem:
        _fail(args, exit_codes.BAD_INPUT, problem)
    apply_standalone(args)
    # Keep each worker's stderr in a file as well as on the console: the tail of a failed worker's
    # stderr goes into the failure report.
    if args.tee == "0" and args.redirects == "0":
        args.tee = "2"
    world_size = parse_min_max_nnodes(args.nnodes)[1] * determine_local_world_size(args.nproc_per_node)
    try:
        # Every worker gets the decision as its options, and applies it.
        options = decided_once(requested, LaunchContext(host, world_size, os.environ))
    except LaunchRefused as e:
        _fail(args, exit_codes.BAD_INPUT, str(e))
    unusable = None if args.dry_run else folder_problem(options)   # a dry run makes no folder
    if unusable:
        _fail(args, exit_codes.BAD_INPUT, unusable)
    # Made once the launch is decided, so that a refused launch (or a dry run) leaves no folder behind.
    owns_log_dir = not args.log_dir and not args.dry_run
    args.log_dir = args.log_dir or ("" if args.dry_run else tempfile.mkdtemp(prefix="opentc-run-"))
    warning = unsynchronized_warning(options, world_size)
    if warning:
        log.warning("%s", warning)
    return RunConfig(args=args, options=options, log_dir=args.log_dir,
                     endpoint=args.rdzv_endpoint or f"{args.master_addr}:{args.master_port}",
                     node=f"node rank {args.node_rank} of {args.nnodes}", owns_log_dir=owns_log_dir)


def _as_workers(args: argparse.Namespace, options: WorkerOptions) -> None:
    """torchrun's arguments rewritten so that each worker is opentc-worker with `options` running the script."""
    worker = worker_command()
    worker_args = [*options.to_argv(), *(["--module"] if args.module else []), args.training_script,
                   *args.training_script_args]
    if len(worker) == 1:       # the installed console script
        args.no_python, args.module = True, False
        args.training_script, args.training_script_args = worker[0], worker_args
    else:                      # python -m opentc_launcher.worker
        args.module = True
        args.training_script, args.training_script_args = worker[2], worker_args


def launch(config: RunConfig) -> NoReturn:
    """Run the workers and end with their outcome: 0, the failed worker's exit code (with its failure report), or
    the stop's; then, unless the caller does it, the after-workers step (after_workers.py: debug mode's reports, and
    after a success the working copy of the cache, when this launcher owns one, published)."""
    options, cache = own_working_copy(config.options, config.log_dir, os.environ,
                                      opened_above=config.args.compile_cache_copy_opened)
    try:
        _launch(config, options, cache)
    finally:
        _remove_own_folders(config, cache)


def _remove_own_folders(config: RunConfig, cache: WorkingCopy | None) -> None:
    """Whatever the outcome: a copy of the cache that was not published is no one's (publication removes its own),
    and the workers' stderr copies in a log folder made here have been read for the failure report by now."""
    if cache is not None:
        shutil.rmtree(cache.working, ignore_errors=True)
    if config.owns_log_dir:
        shutil.rmtree(config.log_dir, ignore_errors=True)


def _launch(config: RunConfig, options: WorkerOptions, cache: WorkingCopy | None) -> NoReturn:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args

    args = config.args
    _as_workers(args, options)
    launch_config, cmd, cmd_args = config_from_args(args)

    def rendezvous_never_completed(seconds: float) -> None:
        _report_launch_failure(args, exit_codes.PEERS_UNREACHABLE, (
            f"the hosts never met: no rendezvous with {config.endpoint} within {seconds:g} s ({config.node}). Either "
            f"that host has not started its launcher (see its log), or another program holds the port there and "
            f"accepted the connection without answering: set MASTER_PORT to a free port. OPENTC_PEER_TIMEOUT (or "
            f"--rdzv-conf timeout=N) sets how long to wait."))
        _remove_own_folders(config, cache)   # os._exit skips launch()'s finally
        logging.shutdown()
        sys.stderr.flush()
        os._exit(exit_codes.PEERS_UNREACHABLE)   # the main thread is blocked inside torch's store client

    watchdog = RendezvousWatchdog(rendezvous_timeout(args.rdzv_conf) + WATCHDOG_MARGIN, rendezvous_never_completed)
    watchdog.start()
    exit_code = exit_codes.OK
    try:
        elastic_launch(launch_config, cmd)(*cmd_args)
    except ChildFailedError as e:
        record = failure_from_child_failed(e, config.log_dir)
        write_failure_report(args.failure_report, record)
        where = f"rank {record.rank}" if record.rank is not None else "a worker"
        log.error("%s failed with exit code %d: %s", where, record.exit_code, record.summary or "(no error record)")
        exit_code = record.exit_code
    except SignalException as e:  # this launcher was stopped; torch has already stopped the workers
        log.error("stopped by %s", e.sigval.name)
        sys.exit(exit_codes.of_signal(e.sigval))
    except Exception as e:  # noqa: BLE001  (before the workers' scripts could report: the OS, or the peers never met)
        _fail(args, *classify_launch_error(e, config.endpoint, config.node, f"{args.nproc_per_node} worker(s)"))
    finally:
        watchdog.disarm()
    if not args.after_workers_by_caller:
        # torch's stop handlers outlive the launch: a stop during the step lands here, as SignalException
        step = AfterWorkers(options, cache, stops=(SignalException,))
        try:
            step.run(succeeded=exit_code == exit_codes.OK)
        except SignalException as e:
            publishing = step.during.startswith("while the compilation cache was being published")
            log.error("stopped by %s after %s, %s%s", e.sigval.name,
                      "every worker succeeded" if exit_code == exit_codes.OK else "the workers ended", step.during,
                      ": the published cache is left as it was" if publishing else "")
            sys.exit(exit_codes.of_signal(e.sigval))
    sys.exit(exit_code)


def dry_run(config: RunConfig) -> str:
    """What the launch would run, decided: the world, the workers' options, and the ledger as they would meet it."""
    args, options = config.args, config.options
    lines = [f"opentc-run --dry-run (nothing was started or written): {args.nproc_per_node} worker(s) per host, "
             f"hosts {args.nnodes}, rendezvous on {config.endpoint}",
             f"backend {options.backend} on {options.device}, worker options: {' '.join(options.to_argv())}",
             f"script: {' '.join([args.training_script, *args.training_script_args])}", "",
             "library changes (what the workers change in libraries' code, on the versions installed here):",
             *(f"  {line}" for line in library_changes_listing(options, os.environ))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> NoReturn:
    configure_logging()
    config = configure(argv)
    if config.args.dry_run:
        print(dry_run(config))
        sys.exit(exit_codes.OK)
    launch(config)


if __name__ == "__main__":
    main()

"""The launcher's public face: every name a front end (the toolkit's `train`) may use. Anything else in the launcher
is its own business and may change without notice; tests/test_layers.py holds the toolkit to this module.

What they serve: reading the job's values (env_values, text, files, script); the compiler settings (options,
setting_names, backend, registry, installed); the machine (host: one record of it); the launch plan (commands, decision,
launch_checks); running it (process, the compile cache's working copy); and after the workers, what each wrote
about itself and about a failure (failure_records, worker_record) and the utilisation reached (mfu)."""

from . import exit_codes
from .after_workers import FINISHING as AFTER_WORKERS_FINISHING
from .after_workers import PUBLISHED as AFTER_WORKERS_PUBLISHED
from .after_workers import AfterWorkers, CommandNotStarted
from .backend import CompilerBackend, FollowUp
from .commands import DEFAULT_MASTER_PORT, Rendezvous, run_argv, worker_command
from .compiler_env import EnvironmentChanges, compiler_environment
from .cuda_driver import XLA_IMAGE_VARIABLE
from .decision import LaunchRefused, decide
from .env_values import MAX_DIGITS, MAX_PORT, BadEnvironmentValue, flag, number_from_env, whole_number
from .failure_records import LAUNCH, FailureRecord, read_error_file
from .files import unwritable, write_json
from .host import HostFacts, probe_host
from .installed import default_compiler, why_default
from .installed import version as installed_version
from .launch_checks import too_many_workers
from .launch_context import LaunchContext
from .library_changes import listing as library_changes_listing
from .mfu import job_utilisation
from .options import CHOICE, FLAG, NAMES, WHOLE, Declared, WorkerOptions, off_names, settable_options
from .process import PR_SET_CHILD_SUBREAPER, die_with_parent, prctl
from .published_cache import WorkingCopy
from .registry import COMPILER_NAMES, DEFAULT_NAMES, backend_named, debug_logs, defaults_off_problem
from .script import why_not_a_script
from .setting_names import COMPILER_OFF, ONE_WORKER_PER_HOST, option_setting
from .setting_names import VARIABLE as SETTING_NAMES_VARIABLE
from .text import printable, tail
from .worker_record import WorkerRecord, read_records
from .working_cache import open_working_copy, publish_working_copy, with_working_copy

__all__ = [
    "AFTER_WORKERS_FINISHING",
    "AFTER_WORKERS_PUBLISHED",
    "CHOICE",
    "COMPILER_NAMES",
    "COMPILER_OFF",
    "DEFAULT_MASTER_PORT",
    "DEFAULT_NAMES",
    "FLAG",
    "LAUNCH",
    "MAX_DIGITS",
    "MAX_PORT",
    "NAMES",
    "ONE_WORKER_PER_HOST",
    "PR_SET_CHILD_SUBREAPER",
    "SETTING_NAMES_VARIABLE",
    "WHOLE",
    "XLA_IMAGE_VARIABLE",
    "AfterWorkers",
    "BadEnvironmentValue",
    "CommandNotStarted",
    "CompilerBackend",
    "Declared",
    "EnvironmentChanges",
    "FailureRecord",
    "FollowUp",
    "HostFacts",
    "LaunchContext",
    "LaunchRefused",
    "Rendezvous",
    "WorkerOptions",
    "WorkerRecord",
    "WorkingCopy",
    "backend_named",
    "compiler_environment",
    "debug_logs",
    "decide",
    "default_compiler",
    "defaults_off_problem",
    "die_with_parent",
    "exit_codes",
    "flag",
    "installed_version",
    "job_utilisation",
    "library_changes_listing",
    "number_from_env",
    "off_names",
    "open_working_copy",
    "option_setting",
    "prctl",
    "printable",
    "probe_host",
    "publish_working_copy",
    "read_error_file",
    "read_records",
    "run_argv",
    "settable_options",
    "tail",
    "too_many_workers",
    "unwritable",
    "whole_number",
    "why_default",
    "why_not_a_script",
    "with_working_copy",
    "worker_command",
    "write_json",
]

"""The launcher's public face: the launch contract, every name a front end (the toolkit's `train`, the image's build
checks) may use to plan, start and finish a launch. Anything else in the launcher is its own business and may change
without notice; tests/test_layers.py holds the toolkit and container/ to this module and to opentc_launcher.common
(the small utilities both sides share: reading values, text, files, process controls).

What they serve: the compiler settings (options, setting_names, backend, registry, installed); the machine and what a
launch is decided by (host, launch_context); the launch plan (commands, decision, launch_checks, compiler_env,
script); running it (the compile cache's working copy); after the workers (after_workers: debug mode's reports and the
cache's publication), what each worker wrote about itself and about a failure (failure_records, worker_record) and the
utilisation reached (mfu); the changes to library code, on the versions a job would run (library_changes); and the
XLA:CUDA plugin the image's build checks (xla.cuda)."""

from . import exit_codes
from .after_workers import FINISHING as AFTER_WORKERS_FINISHING
from .after_workers import PUBLISHED as AFTER_WORKERS_PUBLISHED
from .after_workers import AfterWorkers, CommandNotStarted
from .backend import CompilerBackend, FollowUp
from .commands import DEFAULT_MASTER_PORT, Rendezvous, run_argv, worker_command
from .compiler_env import compiler_environment
from .cuda_driver import XLA_IMAGE_VARIABLE
from .decision import LaunchRefused, decide
from .failure_records import LAUNCH, FailureRecord, read_error_file
from .host import HostFacts, probe_host
from .installed import default_compiler, why_default
from .launch_checks import too_many_workers
from .launch_context import LaunchContext
from .library_changes import listing as library_changes_listing
from .mfu import job_utilisation
from .options import CHOICE, FLAG, NAMES, WHOLE, WorkerOptions, off_names, settable_options
from .published_cache import WorkingCopy
from .registry import COMPILER_NAMES, DEFAULT_NAMES, backend_named, debug_logs, defaults_off_problem
from .script import why_not_a_script
from .setting_names import COMPILER_OFF, ONE_WORKER_PER_HOST, option_setting
from .setting_names import VARIABLE as SETTING_NAMES_VARIABLE
from .worker_record import WorkerRecord, read_records
from .working_cache import open_working_copy, with_working_copy
from .xla.cuda import PluginUnusable, check_cuda_plugin, plugin_api_version

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
    "NAMES",
    "ONE_WORKER_PER_HOST",
    "SETTING_NAMES_VARIABLE",
    "WHOLE",
    "XLA_IMAGE_VARIABLE",
    "AfterWorkers",
    "CommandNotStarted",
    "CompilerBackend",
    "FailureRecord",
    "FollowUp",
    "HostFacts",
    "LaunchContext",
    "LaunchRefused",
    "PluginUnusable",
    "Rendezvous",
    "WorkerOptions",
    "WorkerRecord",
    "WorkingCopy",
    "backend_named",
    "check_cuda_plugin",
    "compiler_environment",
    "debug_logs",
    "decide",
    "default_compiler",
    "defaults_off_problem",
    "exit_codes",
    "job_utilisation",
    "library_changes_listing",
    "off_names",
    "open_working_copy",
    "option_setting",
    "plugin_api_version",
    "probe_host",
    "read_error_file",
    "read_records",
    "run_argv",
    "settable_options",
    "too_many_workers",
    "why_default",
    "why_not_a_script",
    "with_working_copy",
    "worker_command",
]

"""Worker options: what the launcher (or the SageMaker toolkit) decides for every worker.

They travel on the worker's command line (`python -m opentc_launcher.worker [options] script args`),
not through the launcher's own environment, so nothing is configured by mutating `os.environ`. Written there by
`WorkerOptions.to_argv`, read back by the parser `add_worker_arguments` makes (opentc-worker's and opentc-run's).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .env_values import MAX_DIGITS, flag, whole_number
from .installed import default_compiler

DEVICES = ("auto", "cuda", "cpu", "tpu")
# What to do with several XLA:CPU workers (xla only); the first is the default.
CPU_MULTI_WORKER_POLICIES = ("refuse", "unsynchronized")
DEFAULT_CPU_MULTI_WORKER = CPU_MULTI_WORKER_POLICIES[0]
ALL_DEFAULTS = "all"   # --defaults-off all: every compile-time default of the backend off
DEFAULT_DEBUG_FOLDER = "opentc-debug"


def off_names(text: str) -> tuple[str, ...]:
    """The names in a --defaults-off value ("regional, vec-isa" reads as regional and vec_isa), in order, once."""
    names = (part.strip().lower().replace("-", "_") for part in text.split(","))
    return tuple(dict.fromkeys(name for name in names if name))


# How a worker option is written on a command line and parsed (add_worker_arguments): CHOICE (one of `choices`), FLAG
# (true|false), WHOLE (a whole number >= 0), NUMBER (any int), NAMES (comma-separated names), TEXT (a folder or other
# free text), BACKEND (a backend's name: the registry's, which this module cannot import; its callers pass them).
CHOICE, FLAG, WHOLE, NUMBER, NAMES, TEXT, BACKEND = "choice", "flag", "whole", "number", "names", "text", "backend"


@dataclass(frozen=True)
class AsSetting:
    """A worker option that a front end's job sets by a setting of its own named after the option (the SageMaker
    toolkit: a hyperparameter, which it reads, checks and hands to the workers from this declaration alone), and
    what a table of those settings says of it: what the setting does (markdown; `{defaults}` stands for the names of
    every backend's compile-time defaults), and a few words on what the option's default means, if any."""

    doc: str
    default_means: str = ""


@dataclass(frozen=True)
class Declared:
    """A worker option's declaration, beside its field: what opentc-run and opentc-worker say about it (`help`,
    `metavar`), how it is parsed (`kind`, `choices`), whether a front end's job sets it by a setting of the
    option's name (`setting`), and the one backend it is for, if it is one backend's (`backend`: the command lines
    list it in a group of that backend's, so a backend's own options join its group and leave the others' alone)."""

    help: str
    kind: str = TEXT
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    setting: AsSetting | None = None
    backend: str = ""


def _option(default: object = None, *, default_factory: Callable[[], object] | None = None, **declared: Any) -> Any:
    metadata = {"declared": Declared(**declared)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


# What debug mode does, for the settings table (a front end's debug-mode setting is this option's).
DEBUG_MODE_DOC = (
    "the compiler's debug switches, artefacts in `/opt/ml/output/data/compiler/` (so they are in output.tar.gz). "
    "XLA: `PT_XLA_DEBUG_LEVEL=1` (compilation analysis in the log), `XLA_IR_DEBUG`, `XLA_HLO_DEBUG`, "
    "`XLA_SAVE_TENSORS_FILE`/`_FMT=hlo`, `XLA_METRICS_FILE`, `XLA_DUMP_FATAL_STACK`, "
    "`XLA_FLAGS=--xla_dump_to=…/xla_dump`. Inductor: `TORCH_TRACE=…/torch_trace` (torch's structured trace, a file "
    "per rank), `TORCH_LOGS=graph_breaks,recompiles` (in the log, and per rank in `…/torch_logs.txt`), and "
    "tlparse's HTML report of each trace in `…/tlparse/<trace>/index.html`")


@dataclass(frozen=True)
class WorkerOptions:
    """What every worker runs with: each field is a worker option (--backend, --device, ...), declared once here."""

    backend: str = _option(
        default_factory=default_compiler, kind=BACKEND,
        help="xla: the script runs on PyTorch/XLA; inductor: torch.compile's TorchInductor, with its cache, report and "
             "limit (torch_xla untouched); eager: plain PyTorch, no compiler (default: xla where torch-xla is "
             "installed, else inductor)")
    # Launchers pass the decided device to their workers (auto: not decided yet: opentc_launcher.decision).
    device: str = _option("auto", kind=CHOICE, choices=DEVICES,
                          help="auto: for xla PJRT_DEVICE if set, else cuda when a GPU is visible, else cpu")
    debug_mode: bool = _option(
        False, kind=FLAG, metavar="true|false",
        help="the backend's debug switches (torch-xla's metrics, IR and HLO dumps; torch.compile's trace and logs), "
             "their artefacts under --debug-dir; the backend's session sets them in the worker's own process before "
             "its runtime is imported, and keeps any the environment already sets",
        setting=AsSetting(DEBUG_MODE_DOC))
    debug_dir: str = _option("", metavar="DIR",
                             help=f"where debug mode's artefacts go (default: ./{DEFAULT_DEBUG_FOLDER} in the "
                                  f"working folder)")
    cpu_multi_worker: str = _option(
        DEFAULT_CPU_MULTI_WORKER, kind=CHOICE, choices=CPU_MULTI_WORKER_POLICIES, backend="xla",
        help="several XLA:CPU workers cannot all-reduce across processes: refuse to start (default) or run them as "
             "unsynchronised replicas with a loud warning",
        setting=AsSetting('XLA only: several XLA:CPU workers (see [Several workers on XLA:CPU]'
                          '(distribution.md#several-workers-on-xlacpu)): `"refuse"` or `"unsynchronized"`. Inductor '
                          'workers on CPUs use gloo and need nothing'))
    compile_report_dir: str = _option("", metavar="DIR", help="write each worker's compile report (JSON) into DIR")
    compile_cache_dir: str = _option(
        "", metavar="DIR", help="persistent compilation cache root (a sub-folder per backend, version and device)")
    compile_cache_work_dir: str = _option(
        "", metavar="DIR",
        help="compile in a copy of the cache kept in DIR, published back to --compile-cache-dir after a successful "
             "job, for backends whose cache cannot survive a stop (inductor); opentc-run makes one itself when this "
             "is not given")
    max_compilations: int = _option(
        0, kind=WHOLE, metavar="N",
        help="stop with an error once a worker has compiled more than N graphs (inductor: captured by Dynamo, cached "
             "or not; 0: no limit)",
        setting=AsSetting("stop a worker that has compiled more graphs than this (XLA: graphs "
                          "compiled; Inductor: graphs Dynamo captured, from the cache or not)", "no limit"))
    warmup_steps: int = _option(
        5, kind=WHOLE, metavar="N",
        help="the first N optimizer steps are warm-up: left out of the step times and throughput measured for a job "
             "summary, and graphs compiled after them are reported as recompilations",
        setting=AsSetting("the first optimizer steps, counted as warm-up, for every backend and with the "
                          "compiler off: the job summary's step times and throughput leave them out, and a graph "
                          "compiled after them is reported as a recompilation. Raise it for a job that compiles for "
                          "longer (an evaluation, new shapes); give the jobs you compare the same value"))
    compile_progress_seconds: int = _option(
        30, kind=WHOLE, metavar="S",
        help="while a worker compiles for longer than S seconds, a line every S seconds says what it compiles and for "
             "how long (0: never; the default 'progress' off too)",
        setting=AsSetting("while a worker compiles for longer than this many seconds, a line every this many seconds "
                          "says which rank, what it compiles and for how long, so that a long compile does not look "
                          "like a hang; `0` never (as leaving the default `progress` off)",
                          "every 30 s"))
    library_patches: bool = _option(
        True, kind=FLAG, metavar="true|false",
        help="apply the version-guarded fixes for libraries that mishandle XLA tensors (host reads every step, "
             "saving, tied weights: xla/library_patches.py), and on every backend those that take the Trainer's "
             "host reads out of its step (sync_free_step.py) and those that let a transformers 4.x script run on "
             "the image's accelerate and torch-xla (era_patches.py); false: these patches are off, so the libraries "
             "run as installed but for what only observes (counts, times, findings), the launch's own hooks and the "
             "compile-time defaults, which --defaults-off turns off (python -m opentc_launcher.library_changes lists "
             "every change, and the dry run each one's state)",
        setting=AsSetting("the version-guarded fixes for libraries: on XLA, for those that mishandle XLA tensors "
                          "(host reads every step, saving: see [Hugging Face libraries on XLA]"
                          "(compilers.md#hugging-face-libraries-on-xla)); on every backend, for a Trainer step "
                          "without host reads (see [The Trainer's step, without a host read]"
                          "(compilers.md#the-trainers-step-without-a-host-read-every-backend)) and for a "
                          "transformers 4.x script on the image's accelerate and torch-xla (see [Scripts pinned to "
                          "transformers 4.x](migrating-from-training-compiler.md#scripts-pinned-to-transformers-4x)); "
                          "`false` turns these patches off, so the libraries run as installed but for what only "
                          "observes (counts, times and findings, never a result), the launch's own hooks and the "
                          "compile-time defaults, which have their own switch (`defaults_off`): [the ledger]"
                          "(versions.md#library-changes) lists every change, and `train --dry-run` each one's state"))
    summary_dir: str = _option(
        "", metavar="DIR",
        help="write each worker's measurements (optimizer steps, step times, throughput from its batches, peak "
             "memory) as JSON into DIR, for a job summary")
    gpu_count: int = _option(
        -1, kind=NUMBER, metavar="N",
        help="the GPUs on this host, as a launcher above this one counted them (default -1: count them here, "
             "through NVML, honouring CUDA_VISIBLE_DEVICES)")
    defaults_off: str = _option(
        "", kind=NAMES, metavar="NAMES",
        help="leave these compile-time defaults of the backend off: comma-separated names ({declared}), or "
             f"{ALL_DEFAULTS}",
        setting=AsSetting('the compile-time defaults to leave off, by name, comma-separated '
                          '(`"regional,vec_isa"`), or `"all"`: {defaults} ([what each does and saves]'
                          '(compile-time.md)); all are Inductor\'s, and `progress` is XLA\'s too. A name no backend '
                          'has stops the job, whatever the compiler and with the compiler off (exit code 2, naming '
                          'those accepted); a name the running backend lacks (any but `progress` on XLA, any with '
                          'the compiler off) leaves nothing off (logged)', "every default on"))

    def debug_folder(self) -> str:
        """Where debug mode's artefacts go: --debug-dir, else ./opentc-debug in the working folder."""
        return self.debug_dir or os.path.abspath(DEFAULT_DEBUG_FOLDER)

    def is_off(self, default: str) -> bool:
        """Whether the backend's compile-time default `default` was asked to stay off."""
        names = off_names(self.defaults_off)
        return ALL_DEFAULTS in names or default in names

    def to_argv(self) -> list[str]:
        """The worker command-line options that reproduce these options."""
        argv: list[str] = []
        for f in fields(self):
            argv += [f"--{f.name.replace('_', '-')}", str(getattr(self, f.name))]
        return argv

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> WorkerOptions:
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})


def declared_options() -> list[tuple[str, Declared, object]]:
    """Every worker option: (name, declaration, default), in the order of WorkerOptions' fields."""
    defaults = WorkerOptions()
    return [(f.name, f.metadata["declared"], getattr(defaults, f.name)) for f in fields(WorkerOptions)]


def settable_options() -> list[tuple[str, Declared, object]]:
    """The worker options a front end's job sets by settings of their names (Declared.setting)."""
    return [option for option in declared_options() if option[1].setting is not None]


# --- on a command line: opentc-run's and opentc-worker's parsers ---------------------------------------------------

def _on_off(text: str) -> bool:
    value = flag(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = whole_number(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (at most {MAX_DIGITS} digits), got {text!r}")
    return value


def _parsing(declared: Declared, backend_names: tuple[str, ...]) -> dict[str, Any]:
    """argparse's arguments for a kind of option (Declared.kind)."""
    if declared.kind == BACKEND:
        return {"choices": backend_names}
    if declared.kind == CHOICE:
        return {"choices": declared.choices}
    return {"type": {FLAG: _on_off, WHOLE: _non_negative_int, NUMBER: int}.get(declared.kind, str)}


def add_worker_arguments(parser: argparse.ArgumentParser, backends: Mapping[str, Collection[str]]) -> None:
    """Add the worker options to a parser (the worker's own, or opentc-run's), as WorkerOptions declares them: those
    of every backend in one group, each backend's own (Declared.backend) in a group of its own. `backends`: each
    backend's name and its compile-time defaults, as the registry has them (registry.BACKEND_DEFAULTS)."""
    backend_names = tuple(backends)
    groups = {"": parser.add_argument_group("worker options")}
    declared_defaults = "; ".join(f"{name}: {', '.join(defaults)}" for name, defaults in backends.items() if defaults)
    for name, declared, default in declared_options():
        if declared.backend not in groups:
            if declared.backend not in backend_names:
                raise ValueError(f"worker option {name} is declared for backend {declared.backend!r}, which is not "
                                 f"one of {', '.join(backend_names)}")
            groups[declared.backend] = parser.add_argument_group(
                f"worker options for --backend {declared.backend} only")
        groups[declared.backend].add_argument(
            f"--{name.replace('_', '-')}", default=default, metavar=declared.metavar,
            help=declared.help.replace("{declared}", declared_defaults), **_parsing(declared, backend_names))

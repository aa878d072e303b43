"""What the Inductor backend turns on by default to cut compile time (docs/compile-time.md has what each saves).

Each default is logged, left off by name (`--defaults-off NAME`; a front end such as the SageMaker toolkit hands
down its own name for that setting), and none overrides a variable the user set: the user's value is kept, and the
default that would have set it stays out of the way.

- regional: Trainer, Accelerate and plain torch.compile(model) jobs compile each kind of repeated block once
  (regional.py, repeated_blocks.py).
- head: with regional compilation, on CPUs, the model's own forward around the part that holds its blocks (the
  output layer and the loss) is compiled too, as one region (regional.py). Not on GPUs, where the step measured
  slower with it in three runs of three (HEAD_ON_A_GPU).
- vec_isa: on CPUs, Inductor's check of the vector instructions runs once per torch, compiler and CPU, and
  that once in the background from the worker's start, beside the script's own start; on the later jobs, what torch
  still checks with the check skipped (torch 2.7's AMX set: a fresh Python process) is asked in a thread from
  Dynamo's import (vec_isa.py).
- job_id: TORCH_COMPILE_JOB_ID, keyed to the job's lineage (the script, its arguments, the world size and the
  device), so that Dynamo keeps its profile of which dimensions vary from one job to the next, in the cache folder:
  a warm job compiles the dynamic graphs at once instead of a static one first.
- logging: transformers' once-only log calls (`logger.warning_once`, `logger.info_once`) inside compiled code are
  skipped instead of breaking the graph (torch._dynamo.config.ignore_logger_methods).
- warm_start: what a warm job pays before its first step without compiling anything. On CPUs, Inductor's compile
  workers start when there is something to compile (TORCH_WARM_POOL=0), not at every start, where they take the
  few cores from the script; on GPU instances, with cores to spare, torch's own warm-up stays. Inductor's hashes of
  torch's and Triton's sources are kept per installation in the cache folder (source_keys.py). (Hashing Inductor's
  cache keys in a background thread from the script's start, torch 2.14's `prefetch()`, was left out: with it, on
  the 2-core CPU, the script's own start ran slower, its tokenization 33-fold, and a warm Trainer job's first step
  came 15.2 s after eager's instead of 3.5 s; docs/compile-time.md.)
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType, ModuleType

from ..compile_progress import DEFAULT_DOES as PROGRESS_DOES
from ..compile_progress import DEFAULT_NAME as PROGRESS
from ..identity import WorkerIdentity
from ..options import WorkerOptions
from ..patching import arm_change
from ..script import Program
from ..setting_names import DEFAULTS_OFF, setting
from . import regional, source_keys, vec_isa
from .named_settings import REGIONAL_OFF

log = logging.getLogger("opentc_launcher")

OPTIONAL_DEFAULTS = MappingProxyType({
    "regional": "Trainer, Accelerate and plain torch.compile(model) jobs compile each kind of repeated block once, "
                "shared by the blocks of that kind",
    "head": "with regional compilation on a CPU, the output layer and the loss are compiled too, as one region "
            "around the part of the model that holds the blocks",
    "vec_isa": "on CPUs, Inductor's check of the vector instructions runs once per torch, compiler and CPU",
    "job_id": "Dynamo keeps its profile of the dimensions that vary, from one job of a lineage to the next",
    "logging": "transformers' once-only log calls inside compiled code no longer break the graph",
    "warm_start": "a warm job starts sooner: compile workers started only when needed on CPUs, torch's source "
                  "hashes kept per installation",
    PROGRESS: PROGRESS_DOES,
})
WARM_POOL_VARIABLE = "TORCH_WARM_POOL"
JOB_ID_VARIABLE = "TORCH_COMPILE_JOB_ID"
ONCE_ONLY_LOG_CALLS = ("warning_once", "info_once")   # transformers adds them to logging.Logger
HEAD_LEFT = "left eager where asked: "   # in the head's state, before why (dev/gpu-kit reads it from the report)
# Why the head region is a CPU's default only: the H200's plain loop, GPT-2 small in bf16 (benchmarks/RESULTS.md).
HEAD_ON_A_GPU = ("not on a GPU: there the head region made the step slower (GPT-2 small on the H200: 34.7 against "
                 "29.9 ms a step with the blocks alone, and slower in all three runs); it pays on CPUs")
ASKED_AT_THE_END_SECONDS = 10.0   # a script that never compiled: its list of the sets takes a few seconds at most


def skip_once_only_log_calls(dynamo_config: ModuleType) -> None:
    """The `logging` default: transformers' once-only log calls (which it adds to logging.Logger, so after its import)
    are skipped in compiled code instead of breaking the graph. bench_worker applies it too, to compile what a job
    compiles."""
    methods = [getattr(logging.Logger, m) for m in ONCE_ONLY_LOG_CALLS if hasattr(logging.Logger, m)]
    dynamo_config.ignore_logger_methods.update(methods)


def lineage_id(program: Program, world_size: int, device: str) -> str:
    """The same id for the jobs of one lineage (the same script, arguments, world size and device: a re-run, a
    restart), another for any other; torch keeps one shape profile per id and rank."""
    digest = hashlib.sha256()
    if program.module:
        digest.update(b"module\0" + program.target.encode("utf-8", "surrogateescape"))
    else:
        try:
            with open(program.target, "rb") as f:
                digest.update(f.read())
        except OSError:
            digest.update(program.target.encode("utf-8", "surrogateescape"))
    for arg in program.args:
        digest.update(b"\0" + arg.encode("utf-8", "surrogateescape"))
    digest.update(f"\0{world_size}\0{device}".encode())
    return "opentc-" + digest.hexdigest()[:24]


class CompileTimeDefaults:
    """The defaults in one worker: the variables they set before the script, the library hooks they install, and
    what they do at its first compilation."""

    def __init__(self, options: WorkerOptions, process: str):
        self.options = options
        self.process = process
        self.state: dict[str, str] = {}          # default -> what it does here (or why not), for the log and report
        self._prove_in: str | None = None        # the cache folder to prove the vector check in, at first compile
        self._vec_isa_key: dict[str, str] = {}
        self._proves_here = False                  # this worker runs the host's check (its local rank 0)
        self._prover: vec_isa.Prover | None = None   # that check, running from the worker's start
        self._ask_ahead = False                    # a proof holds: torch's list of the sets asked from Dynamo's import
        self._source_keys: source_keys.SourceKeys | None = None
        self._asked: vec_isa.AskedAhead | None = None
        self._first_compile_done = False

    def configure(self, environ: MutableMapping[str, str], identity: WorkerIdentity, program: Program,
                  cache_folder: str) -> None:
        """Before the script: set each default's variables in this process's environment, keeping the user's."""
        for name in OPTIONAL_DEFAULTS:
            if self.options.is_off(name):
                self.state[name] = f"off ({setting(DEFAULTS_OFF)})"
        if "regional" not in self.state:
            self._regional(environ)
        if "head" not in self.state:
            self.state["head"] = self._head_state()
        if "vec_isa" not in self.state:
            self._vec_isa(environ, cache_folder, identity)
        if "job_id" not in self.state:
            self._set(environ, "job_id", JOB_ID_VARIABLE, lineage_id(program, identity.world_size, self.options.device))
        if "warm_start" not in self.state:
            self._warm_start(environ, cache_folder)
        if PROGRESS not in self.state:
            seconds = self.options.compile_progress_seconds
            self.state[PROGRESS] = (f"on: a line every {seconds} s while a compile lasts longer" if seconds else
                                    "off (compile_progress_seconds 0)")
        if "logging" not in self.state:
            self.state["logging"] = "on: " + ", ".join(f"logger.{m}" for m in ONCE_ONLY_LOG_CALLS) + " skipped in " \
                                    "compiled code"

    def begin(self, environ: Mapping[str, str]) -> None:
        """After configure, before the script: start what runs beside the script's own start."""
        if self._prove_in is not None and self._proves_here:
            try:
                self._prover = vec_isa.Prover(self._prove_in, environ)
            except OSError as e:
                log.info("%s: the vector check runs at the first compilation (%s)", self.process, e)

    def _set(self, environ: MutableMapping[str, str], default: str, variable: str, value: str) -> bool:
        """Set `variable` for `default` unless the user set it; whether it was set."""
        if variable in environ:
            self.state[default] = f"the user's {variable}={environ[variable]} kept"
            return False
        environ[variable] = value
        self.state[default] = f"on: {variable}={value}"
        return True

    def _regional(self, environ: MutableMapping[str, str]) -> None:
        # A compile-time default, off by its own name (not with the library patches): with it off for a Trainer job,
        # accelerate's own regional compilation would run, whose copy of the model fails save_pretrained on GPT-2's
        # tied weights (regional.py).
        if not self._set(environ, "regional", regional.VARIABLE, "true"):
            return
        head = not self.options.is_off("head") and not self._on_a_gpu()
        arm_change(regional.ACCELERATE_COMPILE_REGIONS,
                   lambda accelerator: self._refine_accelerate(accelerator, head))
        arm_change(regional.TORCH_COMPILE,
                   lambda torch: regional.patch_torch_compile(torch, self._note_regional, head, self._note_head_left))

    def _head_state(self) -> str:
        regional_state = self.state["regional"]
        if regional_state.startswith("off"):
            return "not needed: the whole model is compiled, its head with it (regional off)"
        if not regional_state.startswith("on"):
            return "not used: accelerate's own regional compilation runs (the user's variable)"
        if self._on_a_gpu():
            return HEAD_ON_A_GPU
        return "on: the model's own forward around its blocks (output layer, loss) compiled as one region"

    def _on_a_gpu(self) -> bool:
        # the head region's one rule of device (HEAD_ON_A_GPU): measured on a GPU only
        return self.options.device == "cuda"

    def _note_regional(self, words: str) -> None:
        if words not in self.state["regional"]:          # a script may compile the same model again
            self.state["regional"] += f"; {words}"

    def _note_head_left(self, why: str) -> None:
        # The state said "on" before the model was seen: say where it could not be, as the report's reader needs it
        note = f"; {HEAD_LEFT}{why}"
        if self.state.get("head", "").startswith("on") and note not in self.state["head"]:
            self.state["head"] += note

    def _refine_accelerate(self, accelerator: ModuleType, head: bool) -> None:
        if not regional.patch_accelerator(accelerator, head, head_left=self._note_head_left):
            log.info("%s: this accelerate has no compile_regions to refine: its own regional compilation runs",
                     self.process)

    def _warm_start(self, environ: MutableMapping[str, str], cache_folder: str) -> None:
        kept = "torch's source hashes kept per installation in the cache folder"
        if self.options.device == "cpu":
            self._set(environ, "warm_start", WARM_POOL_VARIABLE, "0")
            if cache_folder:
                self.state["warm_start"] += f"; {kept}"
        elif cache_folder:
            self.state["warm_start"] = f"on: {kept}; torch's own warm-up of its compile workers stays on " \
                                       f"{self.options.device}"
        else:
            self.state["warm_start"] = ("not needed: torch's own warm-up of its compile workers stays on "
                                        f"{self.options.device}, and there is no cache folder to keep hashes in")
        if cache_folder:
            self._source_keys = source_keys.SourceKeys(cache_folder)

    def _vec_isa(self, environ: MutableMapping[str, str], cache_folder: str, identity: WorkerIdentity) -> None:
        if self.options.device != "cpu":
            self.state["vec_isa"] = "not needed: no CPU kernels on " + self.options.device
            return
        if vec_isa.VARIABLE in environ:
            self.state["vec_isa"] = f"the user's {vec_isa.VARIABLE}={environ[vec_isa.VARIABLE]} kept"
            return
        if not cache_folder:
            self.state["vec_isa"] = "not used: no cache folder to keep the check's proof in"
            return
        key = vec_isa.machine_key(environ)
        found = vec_isa.proven(cache_folder, key)
        if found:
            environ[vec_isa.VARIABLE] = "1"
            self.state["vec_isa"] = f"on: {vec_isa.VARIABLE}=1 (proven for this torch, compiler and CPU)"
            self._ask_ahead = True
        elif found is False:
            self.state["vec_isa"] = "not used: a set the CPU reports failed torch's check here, so it keeps checking"
        else:
            self._prove_in, self._vec_isa_key = cache_folder, key
            self.state["vec_isa"] = ("on: torch's check runs once, in the background from the job's start, and its "
                                     "proof is kept")
            self._proves_here = identity.local_rank == 0   # one check a host: the others wait for its proof

    def dynamo_imported(self) -> None:
        """When the script (or a library it imports) has imported Dynamo, usually well before its first compilation:
        on a machine whose proof holds, torch's list of the vector sets asked in a thread from now."""
        if not self._ask_ahead or self._first_compile_done:
            return
        self._ask_ahead = False
        try:
            asked = vec_isa.AskedAhead.start()
        except Exception as e:  # noqa: BLE001  (torch's internals: the first compilation asks, as without it)
            asked = f"{type(e).__name__}: {e}"
        if isinstance(asked, str):
            log.info("%s: torch's list of the vector sets is asked at the first compilation (%s)", self.process, asked)
        else:
            self._asked = asked

    def at_first_compile(self) -> None:
        """At the start of the process's first compilation, before Inductor computes any cache key."""
        if self._first_compile_done:
            return
        self._first_compile_done = True
        if self._asked is not None:
            self._take_the_sets_asked(self._asked)
        if self._source_keys is not None:
            self._give_source_keys(self._source_keys)
        if self._prove_in is not None:
            self._take_the_proof(self._prove_in, self._vec_isa_key)
        if "logging" in self.state and self.state["logging"].startswith("on"):
            self._skip_once_only_log_calls()

    def _take_the_proof(self, folder: str, key: dict[str, str]) -> None:
        """The background check's proof, waited for; where none came, torch's check here, as without a prover."""
        where = "in the background"
        if self._prover is not None:
            waited = time.monotonic()
            problem = self._prover.wait()
            self._prover = None
            log.info("%s: the first compilation waited %.1f s for the background vector check", self.process,
                     time.monotonic() - waited)
            found = vec_isa.proven(folder, key) if problem is None else None
            if problem:
                log.info("%s: the background vector check did not prove anything (%s): torch's check runs here",
                         self.process, problem)
        elif self._proves_here:   # its check did not start (begin logged why): torch's check runs here, now
            found = None
        else:
            found = vec_isa.wait_for_proof(folder, key)
        if found is None:
            where = "at the first compilation"
            try:
                found = vec_isa.prove(folder, key)
            except Exception as e:  # noqa: BLE001  (private torch internals: torch's own check runs instead)
                found = False
                log.warning("%s: could not prove the vector-instruction check (%s: %s): torch's check runs as usual",
                            self.process, type(e).__name__, e)
        elif found:
            from torch._inductor import config

            config.cpp.vec_isa_ok = True
        self.state["vec_isa"] = (f"on: proven {where}, the proof kept for later jobs" if found
                                 else "not used: a set the CPU reports failed torch's check")

    def after_first_compile(self) -> None:
        """At the end of the process's first compilation: what it computed once, kept for the next job."""
        keys, self._source_keys = self._source_keys, None
        if keys is not None:
            try:
                keys.keep()
            except Exception as e:  # noqa: BLE001  (torch's internals: the next job hashes, as without it)
                log.info("%s: torch's source hashes not kept (%s: %s)", self.process, type(e).__name__, e)

    def _give_source_keys(self, keys: source_keys.SourceKeys) -> None:
        started = time.monotonic()
        try:
            words = keys.give()
        except Exception as e:  # noqa: BLE001  (torch's internals: torch hashes its sources, as without it)
            words = f"hashed here ({type(e).__name__}: {e})"
        log.info("%s: torch's source hashes %s (%.2f s)", self.process, words, time.monotonic() - started)

    def _take_the_sets_asked(self, asked: vec_isa.AskedAhead) -> None:
        waited = time.monotonic()
        problem = asked.wait()
        if problem:
            log.info("%s: torch's list of the vector sets, asked from Dynamo's import, did not come (%s): the first "
                     "compilation asks it", self.process, problem)
        else:
            log.info("%s: the first compilation waited %.1f s for torch's list of the vector sets, asked from "
                     "Dynamo's import (%.1f s in all)", self.process, time.monotonic() - waited, asked.seconds or 0.0)

    def close(self) -> None:
        """At the worker's end: a check still running for a script that never compiled is stopped; torch's list of
        the sets, asked for one, is waited for a little (its load probe is a process of torch's)."""
        if self._prover is not None:
            self._prover.stop()
            self._prover = None
        if self._asked is not None and not self._first_compile_done:
            self._asked.wait(ASKED_AT_THE_END_SECONDS)
        self._asked = None

    def _skip_once_only_log_calls(self) -> None:
        try:
            import torch._dynamo.config as dynamo_config

            skip_once_only_log_calls(dynamo_config)
        except Exception as e:  # noqa: BLE001  (a private config: the graph breaks stay, as before)
            log.warning("%s: once-only log calls still break graphs (%s: %s)", self.process, type(e).__name__, e)

    def whole_model_words(self) -> str:
        """How this job compiles the whole model instead of each block, in words (for a finding's fix)."""
        state = self.state.get("regional", "")
        if state.startswith("on"):
            return f"compile the whole model ({setting(REGIONAL_OFF)})"
        if state.startswith("the user's"):
            return f"compile the whole model ({regional.VARIABLE}=false)"
        return "compile the whole model instead of each block"

    def log_line(self) -> str:
        return "; ".join(f"{name}: {what}" for name, what in self.state.items())

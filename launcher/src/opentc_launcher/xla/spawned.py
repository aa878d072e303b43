"""The worker's set-up and diagnostics in the processes a script starts itself with `torch_xla.launch` or
`xmp.spawn`.

Those run the training in new processes (multiprocessing's spawn) while the worker that started them
compiles nothing. torch-xla starts them all through `torch_xla._internal.pjrt.run_multiprocess(fn, ...)`;
the worker wraps `fn` there so that each new process, before the script's function runs, moves modules as its
parent does (the parameter swap switch), opens its own persistent cache folder, counts its own steps, honours
the compilation limit, and writes its own compile report (`compile-report-rank<N>-spawned<K>.json`, K = the
process's ordinal in torch-xla's world).
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from .. import exit_codes
from ..failure_records import read_error_record
from ..identity import WorkerIdentity
from ..options import WorkerOptions
from ..patching import LAUNCH, LibraryChange
from ..process import StoppedWithExitCode, configure_logging, exit_code_of
from ..replace import replace_once
from ..worker_session import WorkerSession
from .parameters import parameters_kept_on_move

log = logging.getLogger("opentc_launcher")

_attached = threading.Lock()   # one session per process, even where torch-xla runs a thread per device
_started = threading.Event()    # this process's script started processes through torch-xla


def processes_started() -> bool:
    """Whether the script started processes through torch-xla here (they do its work, and report for themselves)."""
    return _started.is_set()


class SpawnedWorkerStopped(StoppedWithExitCode):
    """A process the script started stopped itself (the compilation limit): the worker ends with its exit code
    and its reason instead of multiprocessing's "a process terminated abruptly"."""


# How a process the script started gets the worker's set-up: XlaSession.attach (passed in, so that this module
# and the session need not import each other; a classmethod pickles by name into the new process).
Attach = Callable[[WorkerOptions, WorkerIdentity, str, bool], WorkerSession]


@dataclass(frozen=True)
class InSpawnedProcess:
    """The script's function, as torch-xla pickles it into each new process, with the worker's diagnostics."""

    fn: Callable[..., Any]
    options: WorkerOptions
    parent: str        # the starting worker's process name, rank<N>
    error_dir: str     # where a process that stops itself leaves its reason for the starting worker
    keep_parameters: bool   # the starting process's swap switch when it launched (the script may have set it)
    attach: Attach

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not _attached.acquire(blocking=False):    # another device thread of this process has the session
            return self.fn(*args, **kwargs)
        import torch_xla.runtime as xr

        configure_logging()
        process = f"{self.parent}-spawned{xr.global_ordinal()}"
        identity = WorkerIdentity(rank=xr.global_ordinal(), local_rank=xr.local_ordinal(),
                                  world_size=xr.world_size(), local_world_size=xr.local_process_count())
        # This process's own error record (the compilation limit writes one), read back by the starting worker.
        os.environ["TORCHELASTIC_ERROR_FILE"] = os.path.join(self.error_dir, f"{process}.json")
        session = self.attach(self.options, identity, process, self.keep_parameters)
        log.info("%s: started by the script (torch_xla.launch / xmp.spawn) on PJRT_DEVICE=%s", process,
                 self.options.device.upper())
        exit_code = exit_codes.FAILED
        try:
            result = self.fn(*args, **kwargs)
            exit_code = exit_codes.OK
            return result
        except BaseException as exc:
            exit_code = exit_code_of(exc)
            raise
        finally:
            session.finish(exit_code)


def _stopped_child(error_dir: str) -> SpawnedWorkerStopped | None:
    for name in sorted(os.listdir(error_dir)):
        record = read_error_record(os.path.join(error_dir, name))
        if record is not None and record.exit_code is not None:
            return SpawnedWorkerStopped(record.exit_code, record.summary)
    return None


def follow_spawned_processes(options: WorkerOptions, identity: WorkerIdentity, attach: Attach) -> bool:
    """Wrap torch-xla's process launcher so the processes it starts get this worker's set-up and diagnostics."""
    from torch_xla._internal import pjrt

    original = pjrt.run_multiprocess
    params = inspect.signature(original).parameters
    if list(params)[:2] != ["fn", "args"] or "start_method" not in params:
        log.warning("torch-xla's run_multiprocess is not the one this launcher knows: processes started by "
                    "torch_xla.launch / xmp.spawn get no compile report, cache, compilation limit or parameter "
                    "swap switch")
        return False
    parent = f"rank{identity.rank}"

    def run_multiprocess(fn: Callable[..., Any], *args: Any, start_method: str = "spawn", **kwargs: Any) -> Any:
        _started.set()
        error_dir = tempfile.mkdtemp(prefix="opentc-spawned-")
        try:
            spawned = InSpawnedProcess(fn, options, parent, error_dir, parameters_kept_on_move(), attach)
            return original(spawned, *args, start_method=start_method, **kwargs)
        except BrokenProcessPool as e:
            stopped = _stopped_child(error_dir)
            if stopped is not None:
                raise stopped from e
            raise
        finally:
            shutil.rmtree(error_dir, ignore_errors=True)

    replace_once(pjrt, "run_multiprocess", run_multiprocess)
    return True


CHANGE = LibraryChange(
    name="spawned-processes-followed", module="torch_xla._internal.pjrt",
    target="torch_xla._internal.pjrt.run_multiprocess", kind=LAUNCH, backend="xla", apply=follow_spawned_processes,
    why="the processes a script starts with torch_xla.launch or xmp.spawn get the worker's set-up (the swap switch, "
        "the cache, the compilation limit, the library patches as the worker has them, a compile report)",
    unpatched="those processes get no compile report, cache, compilation limit or parameter swap switch")

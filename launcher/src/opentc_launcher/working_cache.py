"""The working copy of the compilation cache around one launch, for a backend whose cache must not be written in place
(published_cache): its folder chosen, the copy opened before the workers start, and published after they succeed.

One set of steps for every launcher: `opentc-run` on its own takes them all (own_working_copy, then
publish_working_copy); a front end that starts it (the SageMaker toolkit) plans the folder (with_working_copy),
opens the copy before its workers and publishes it after them, under its own stop handling and time bound, and hands
the folder down (--compile-cache-work-dir) with --compile-cache-copy-opened, so that opentc-run leaves the copy to it.
opentc-run given --compile-cache-work-dir alone owns the copy there: it opens it, and publishes it after a success.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import replace

from .commands import WORKING_CACHE
from .options import WorkerOptions
from .published_cache import WorkingCopy
from .registry import backend_named

log = logging.getLogger("opentc_launcher")


def with_working_copy(options: WorkerOptions, scratch: str) -> WorkerOptions:
    """`options` with the folder the workers compile in (under the launch's own `scratch` folder) when they use a
    cache and no launcher above this one chose that folder. Pure."""
    if options.compile_cache_work_dir or not options.compile_cache_dir:
        return options
    return replace(options, compile_cache_work_dir=os.path.join(scratch, WORKING_CACHE))


def open_working_copy(options: WorkerOptions, env: Mapping[str, str],
                      stopped: Callable[[], bool] = lambda: False, fresh: bool = False) -> WorkingCopy | None:
    """The backend's working copy, filled from the published cache (and logged), or None where the workers use the
    cache folder itself (a backend that needs no copy, a cache folder the user chose: `env`, the container's).
    `stopped` says when the job is stopping (a wait for another job's lock ends then); `fresh`: the working folder
    may hold an earlier run's copy (a folder the user gave), emptied first."""
    cache = backend_named(options.backend).cache_copy(options, env)
    if cache is not None:
        if fresh:
            shutil.rmtree(cache.working, ignore_errors=True)
        log.info("compilation cache %s: %s (the workers compile in %s)", cache.published, cache.open(stopped),
                 cache.working)
    return cache


def own_working_copy(options: WorkerOptions, scratch: str, env: Mapping[str, str],
                     opened_above: bool = False) -> tuple[WorkerOptions, WorkingCopy | None]:
    """For a launcher: the options with the working folder (the one given, or one under `scratch`), and the copy it
    must publish, opened; None when the launcher that started this one opened it (`opened_above`), or there is
    none."""
    if opened_above:
        return options, None
    with_copy = with_working_copy(options, scratch)
    return with_copy, open_working_copy(with_copy, env, fresh=bool(options.compile_cache_work_dir))


def publish_working_copy(cache: WorkingCopy, stopped: Callable[[], bool] = lambda: False) -> str:
    """After a successful launch: the copy published in place of the cache, and its folder removed. What it did, for
    the log; raises OSError and StopRequested as publish() does."""
    try:
        return cache.publish(stopped)
    finally:
        shutil.rmtree(cache.working, ignore_errors=True)

"""A compile that looks alive: while a worker compiles for longer than a while (30 s by default), a line every that
often says which rank, what it compiles, for how long so far and how many graphs it has done; and every compilation's
place on the process's clock, for the compile report's timeline (where the compile time went).

A compiler backend tells it when a compilation starts (what: a function, a region, a step's graph) and ends, from the
thread that compiles; a thread of its own wakes only when a line is due. A compile shorter than the interval prints
nothing. Generic: the backends name what they compile.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TypedDict

log = logging.getLogger("opentc_launcher")

# The compile-time default's name (--defaults-off progress) and what it does, for every backend that compiles.
DEFAULT_NAME = "progress"
DEFAULT_DOES = ("while a worker compiles for longer than a while (30 s), a line every that often says what it "
                "compiles and for how long")

MAX_TIMELINE = 200   # compilations kept for the report: a job that compiles more has a recompilation finding


class TimelineEntry(TypedDict):
    what: str
    started_s: float    # seconds after the worker's session started
    seconds: float


def every(options_seconds: int, off: bool) -> float:
    """Seconds between lines: the option's, none when the default is left off."""
    return 0.0 if off else float(options_seconds)


@dataclass
class CompileProgress:
    process: str
    every: float                                   # seconds between lines; 0: no lines (the timeline is kept)
    timeline: list[TimelineEntry] = field(default_factory=list)
    done: int = 0                                  # compilations ended
    _origin: float = field(default_factory=time.monotonic)
    _compiling: tuple[str, float] | None = None    # (what, since)
    _wake: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None

    def started(self, what: str) -> None:
        with self._wake:
            self._compiling = (what, time.monotonic())
            if self.every > 0 and self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True, name="opentc-compile-progress")
                self._thread.start()
            self._wake.notify()

    def ended(self, counted: bool = True) -> None:
        """The compilation under way ended; `counted` False when it turned out to compile nothing (an XLA sync whose
        graph was cached): it is neither done nor in the timeline."""
        with self._wake:
            if self._compiling is None:
                return
            what, since = self._compiling
            now = time.monotonic()
            self._compiling = None
            self._wake.notify()
            if not counted:
                return
            self.done += 1
            if len(self.timeline) < MAX_TIMELINE:
                self.timeline.append(TimelineEntry(what=what, started_s=round(since - self._origin, 3),
                                                   seconds=round(now - since, 3)))

    def line(self, now: float) -> str | None:
        """What to say of the compile under way at `now` (time.monotonic()), or None when there is none."""
        if self._compiling is None:
            return None
        what, since = self._compiling
        graphs = "no graph done before it" if not self.done else f"{self.done} done before it"
        return f"{self.process}: still compiling {what}: {now - since:.0f} s so far ({graphs})"

    def _watch(self) -> None:
        with self._wake:
            while True:
                current = self._compiling
                if current is None:
                    self._wake.wait()
                    continue
                due = current[1] + self.every
                while self._compiling is current:   # started() makes a new tuple: another compilation is not this
                    remaining = due - time.monotonic()
                    if remaining > 0:
                        self._wake.wait(timeout=remaining)
                        continue
                    text = self.line(time.monotonic())
                    due += self.every
                    self._wake.release()   # the compiling thread never waits on the log's writing
                    try:
                        log.info("%s", text)
                    finally:
                        self._wake.acquire()

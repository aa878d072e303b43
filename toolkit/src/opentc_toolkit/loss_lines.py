"""The loss series and the Trainer's own throughput, read from what the workers print (stdout and stderr), with no
change to the script.

Recognised, one value per line:
- the Hugging Face Trainer's log lines, Python dicts: `{'loss': '4.51', 'grad_norm': ..., 'epoch': '0.25'}`
  (values quoted or not; its `step` when present), and its final line with `train_samples_per_second` /
  `train_tokens_per_second`;
- a script's own lines with the word `loss` and a number after it: `loss 1.23`, `loss: 1.23`, `loss=1.23`,
  `train loss 1.23`, `Loss = 1.23` (any letter case), with `step N` (or `step: N`, `step=N`) on the same line when
  there is one.
Words that only contain "loss" (`train_loss`, `eval_loss`, `loss_type`) are not a loss, nor is a line with two
losses (`first loss 5.99, last loss 1.84`). Evaluation is not training: a loss with an evaluation word before it on
its line (`Test set: Average loss: 0.0022`, `validation loss 1.2`, `Eval loss = 0.8`; EVALUATION_WORDS) is no point
of the series, only counted (the summary says how many were left out). Lines with a step give the series; where no
line has one (the Trainer's), the lines are numbered in the order they came. With several workers printing, the
first value seen for a step is kept. A loss that is not a number (nan, inf) is kept as null: the job diverged there.
Only the first MAX_LINE_CHARS characters of a line are read, in time linear in them.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
import time

from opentc_compare.summary import Loss, LossPoint

MAX_POINTS = 10_000
MAX_LINE_CHARS = 16_384   # a loss line is short; what a line holds past this is not read
TRAINER = "the Trainer's log"
SCRIPT = "the script's own loss lines"

_NUMBER = r"(-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|nan|inf)"
# transformers 5 prints the values as strings: {'loss': '5.909', ...}; older ones as numbers.
_DICT_LOSS = re.compile(r"""['"]loss['"]\s*:\s*['"]?""" + _NUMBER)
_DICT_STEP = re.compile(r"""['"]step['"]\s*:\s*['"]?([0-9]{1,18})(?![0-9])""")
# The separator is `\s*(?:[:=]\s*)?`, never `\s*[:=]?\s*`: with two runs of blanks next to each other a failed match
# tries every way of splitting the blanks between them, which takes time quadratic in their number (a line of
# "loss" and 50,000 blanks took a minute). Each pattern here can split its input one way only: linear time.
_SEPARATOR = r"\s*(?:[:=]\s*)?"
_WORD_LOSS = re.compile(r"(?<![\w.])loss\b(?!_)" + _SEPARATOR + _NUMBER, re.IGNORECASE)
_WORD_STEP = re.compile(r"(?<![\w.])step\b" + _SEPARATOR + r"([0-9]{1,18})(?![0-9])", re.IGNORECASE)
_WORTH_READING = re.compile(r"loss|train_", re.IGNORECASE)   # most lines have neither: skipped at once
# Words that make the loss after them an evaluation's, whole words only ("test_run" or "validate_every" are not).
EVALUATION_WORDS = ("test", "testing", "eval", "evaluation", "evaluating", "val", "valid", "validation", "validating")
_EVALUATION = re.compile(r"\b(?:" + "|".join(EVALUATION_WORDS) + r")\b", re.IGNORECASE)
_TRAINER_RATES = {key: re.compile(rf"""['"]{key}['"]\s*:\s*['"]?{_NUMBER}""")
                  for key in ("train_samples_per_second", "train_tokens_per_second", "train_runtime")}


class LossLines:
    """Fed line by line (from the supervisor's pumps, in any thread); `loss()` and `trainer_rates()` when the job
    has ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stepped: dict[int, float] = {}
        self._in_order: list[float] = []
        self._sources: set[str] = set()
        self._trainer: dict[str, float] = {}
        self._evaluation_lines = 0
        self._arrived: list[float] = []   # time.time() of each loss line, kept or not (the last MAX_POINTS)

    def feed(self, line: str) -> None:
        line = line[:MAX_LINE_CHARS]
        if not _WORTH_READING.search(line):
            return
        with self._lock:
            for key, pattern in _TRAINER_RATES.items():
                rate = pattern.search(line)
                if rate and math.isfinite(float(rate[1])):   # a rate of inf (a run of no time) says nothing
                    self._trainer[key] = float(rate[1])
            dictionary = _DICT_LOSS.search(line)
            found: list[re.Match[str]] = [dictionary] if dictionary is not None else list(_WORD_LOSS.finditer(line))
            if len(found) != 1:
                return
            if not dictionary and _EVALUATION.search(line, 0, found[0].start()):
                self._evaluation_lines += 1
                return
            value = float(found[0][1])
            self._arrived.append(time.time())
            del self._arrived[:-MAX_POINTS]
            step_match = (_DICT_STEP if dictionary else _WORD_STEP).search(line)
            self._sources.add(TRAINER if dictionary else SCRIPT)
            if step_match:
                if int(step_match[1]) not in self._stepped and len(self._stepped) < MAX_POINTS:
                    self._stepped[int(step_match[1])] = value
            elif len(self._in_order) < MAX_POINTS:
                self._in_order.append(value)

    def loss(self) -> Loss:
        with self._lock:
            series = sorted(self._stepped.items()) if self._stepped else list(enumerate(self._in_order))
            source = " and ".join(sorted(self._sources)) if self._sources else None
            evaluation_lines = self._evaluation_lines
        points = [LossPoint(step=step, loss=value if value == value and abs(value) != float("inf") else None)
                  for step, value in series]
        return Loss(source=source, points=points, evaluation_lines=evaluation_lines)

    def arrived_after(self, moment: float) -> int:
        """How many loss lines came after `moment` (time.time()): a script's own processes that trained after the
        launcher's worker stopped stepping print them."""
        with self._lock:
            return len(self._arrived) - bisect.bisect_right(self._arrived, moment)

    def trainer_rates(self) -> dict[str, float]:
        with self._lock:
            return dict(self._trainer)

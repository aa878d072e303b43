"""The job summary: what one job measured, in one JSON file (output/data/job-summary.json, so SageMaker keeps it
in output.tar.gz). The toolkit writes it for every job, compiler on or off, finished, failed or stopped; this
module is the one place its format and its one-line headline are defined.

    format               "opentc-job-summary/1"
    job_name, outcome    {exit_code, succeeded, stopped, headline}
    backend, device      eager | xla | inductor; cpu | cuda | tpu
    workers, hosts       processes in all, and the hosts' names
    versions             {torch, torch-xla, transformers, opentc}
    wall_seconds         the job, start to end, on this host
    first_step_seconds   from the job's start to the end of the first optimizer step (null: none)
    optimizer_steps      rank 0's (the lowest rank this host ran)
    step_seconds         {median, p90, measured_steps, warmup_steps}: between optimizer steps, warm-up excluded
    throughput           {samples_per_second, tokens_per_second, source, trainer_samples_per_second, ...}
    loss                 {source, points: [{step, loss}]}
    peak_memory_mb       the highest of the workers'; per worker in `processes`
    compile              {seconds, graphs_compiled, cache_hits} (null without a compiler)
    findings             what the workers found wrong with the script, each once, then the compile reports' findings,
                         one of each kind (host reads, graph breaks, ...) ([]: nothing)
    processes            per worker process: rank, optimizer_steps, peak_memory_mb, peak_memory_kind, compile ...
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FORMAT = "opentc-job-summary/1"
FILE_NAME = "job-summary.json"
# A real summary is a few KB to a few MB (the loss series is capped at 10,000 points). Reading is refused past this:
# someone else's file could be a gzip bomb, and parsed JSON takes up to ~20x its bytes in memory.
MAX_BYTES = 16 * 2**20


class NotASummary(ValueError):
    """A file that is not a job summary this version reads; the message says what it is instead."""


@dataclass(frozen=True)
class Kind:
    """A value a field may hold: `accepts` says yes or no, `name` is what messages call it."""
    name: str
    accepts: Callable[[Any], bool]


@dataclass(frozen=True)
class Record:
    """An object whose named fields are checked (each may be null, and missing unless `required`); other fields
    pass unchecked, so that a newer toolkit can add some."""
    name: str
    fields: dict[str, Shape] = field(default_factory=dict)
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class ListOf:
    """A list, each item of one shape (never null)."""
    name: str
    item: Shape


Shape = Kind | Record | ListOf


def _fits_a_float(value: Any) -> bool:
    try:   # the table scales figures as floats: an int past 1.8e308 would raise OverflowError there
        return math.isfinite(float(value))
    except OverflowError:
        return False


NUMBER = Kind("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and _fits_a_float(v))
WHOLE = Kind("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool) and _fits_a_float(v))
TEXT = Kind("text", lambda v: isinstance(v, str))
FLAG = Kind("true or false", lambda v: isinstance(v, bool))

LOSS_POINT = Record('a loss point {"step": a whole number or null, "loss": a number or null}',
                    {"step": WHOLE, "loss": NUMBER}, required=("step", "loss"))   # the table reads both
PROCESS = Record("an object (one worker process's figures)")   # nothing here reads inside

# The format's fields and what each may hold: the one place a summary from elsewhere is checked, so that the
# table and the plot can take the types for granted.
SCHEMA = Record("a job summary", {
    "job_name": TEXT,
    "outcome": Record("an object {exit_code, succeeded, stopped, headline}",
                      {"exit_code": WHOLE, "succeeded": FLAG, "stopped": FLAG, "headline": TEXT}),
    "backend": TEXT, "device": TEXT, "workers": WHOLE, "workers_on_this_host": WHOLE,
    "hosts": ListOf("a list of host names", TEXT),
    "current_host": TEXT,
    "versions": Record("an object {torch, torch-xla, transformers, opentc}",
                       dict.fromkeys(("torch", "torch-xla", "transformers", "opentc"), TEXT)),
    "wall_seconds": NUMBER, "first_step_seconds": NUMBER, "optimizer_steps": WHOLE,
    "step_seconds": Record("an object {median, p90, measured_steps, warmup_steps}",
                           {"median": NUMBER, "p90": NUMBER, "measured_steps": WHOLE, "warmup_steps": WHOLE}),
    "throughput": Record("an object {samples_per_second, tokens_per_second, source, ...}",
                         {"samples_per_second": NUMBER, "tokens_per_second": NUMBER, "source": TEXT,
                          "trainer_samples_per_second": NUMBER, "trainer_tokens_per_second": NUMBER}),
    "loss": Record("an object {source, points}",
                   {"source": TEXT, "points": ListOf("a list of loss points", LOSS_POINT)}),
    "peak_memory_mb": NUMBER,
    "compile": Record("an object {seconds, graphs_compiled, cache_hits}",
                      {"seconds": NUMBER, "graphs_compiled": WHOLE, "cache_hits": WHOLE}),
    "findings": ListOf("a list of findings", TEXT),
    "processes": ListOf("a list of objects, one per worker process", PROCESS),
})


class _Refused(ValueError):
    """A value JSON can write but a summary never holds."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"holds {name}, which is not JSON: a summary has null for a figure that is not a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):   # 1e999 parses to inf
        raise _Refused(f"holds the number {text[:40]}, beyond what a float holds (1.8e308): no figure is that large")
    return value


def load(raw: bytes, where: str) -> dict[str, Any]:
    """The summary in `raw` (a file's bytes, at most MAX_BYTES), checked against the format; NotASummary naming
    `where` (the job argument) and what was wrong."""
    if len(raw) > MAX_BYTES:
        raise too_large(where)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotASummary(f"{where}: {FILE_NAME} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                          f"a job summary is JSON in UTF-8, as the toolkit writes it") from None
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise NotASummary(f"{where}: {FILE_NAME} is nested too deeply to read; a job summary is a few levels "
                          f"deep") from None
    except _Refused as e:
        raise NotASummary(f"{where}: {FILE_NAME} {e}") from None
    except ValueError as e:   # JSONDecodeError, and ints of more than 4,300 digits
        raise NotASummary(f"{where} is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise NotASummary(f"{where} is not a job summary of format {FORMAT} (it holds {_shown(data)}, not an object)")
    if data.get("format") != FORMAT:
        raise NotASummary(f"{where} is not a job summary of format {FORMAT} (its format: {_shown(data.get('format'))})")
    _check(data, SCHEMA, "", where, nullable=False)
    return data


def too_large(where: str) -> NotASummary:
    return NotASummary(f"{where}: its {FILE_NAME} is larger than {MAX_BYTES // 2**20} MiB, the most this reads (a job "
                       f"summary is a few MB at most)")


def _check(value: Any, shape: Shape, path: str, where: str, nullable: bool = True) -> None:
    """Raise NotASummary at the first value in `value` that `shape` does not accept. Goes only as deep as the
    schema, whatever the file's nesting."""
    if value is None and nullable:
        return
    if isinstance(shape, Kind):
        accepted = shape.accepts(value)
    else:
        accepted = isinstance(value, dict if isinstance(shape, Record) else list)
    if not accepted:
        raise NotASummary(f"{where}: field {path} is {_shown(value)}, not {shape.name}{' or null' * nullable}")
    if isinstance(shape, Record):
        for name in shape.required:
            if name not in value:
                raise NotASummary(f"{where}: field {path} has no {name!r}: each is {shape.name}")
        for name, inner in shape.fields.items():
            _check(value.get(name), inner, f"{path}.{name}" if path else name, where)
    elif isinstance(shape, ListOf):
        for i, item in enumerate(value):
            _check(item, shape.item, f"{path}[{i}]", where, nullable=False)


def _shown(value: Any) -> str:
    """A value found in a file, short and printable (JSON's escapes for control characters), never recursing."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int) and not isinstance(value, bool) and not _fits_a_float(value):
        return f"a whole number of {len(str(abs(value)))} digits (too large)"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: float | None, unit: str, digits: int = 1) -> str:
    if value is None:
        return "unknown"
    return f"{value:,.{digits}f}{unit}"


def headline(summary: dict[str, Any]) -> str:
    """The job in one line, for the end of its log."""
    steps = summary.get("step_seconds") or {}
    throughput = summary.get("throughput") or {}
    compile_ = summary.get("compile")
    parts = [f"{summary.get('backend')} on {summary.get('device')}, {summary.get('workers')} worker(s)",
             f"{summary.get('optimizer_steps', 0)} optimizer steps",
             f"median step {_number(steps.get('median') and steps['median'] * 1000, ' ms')} "
             f"(p90 {_number(steps.get('p90') and steps['p90'] * 1000, ' ms')})"]
    if throughput.get("samples_per_second") is not None:
        parts.append(f"{_number(throughput['samples_per_second'], ' samples/s')}"
                     + (f", {_number(throughput['tokens_per_second'], ' tokens/s', 0)}"
                        if throughput.get("tokens_per_second") is not None else "")
                     + f" ({throughput.get('source')})")
    parts.append(f"first step after {_number(summary.get('first_step_seconds'), ' s')}")
    parts.append(f"peak memory {_number(summary.get('peak_memory_mb'), ' MB', 0)}")
    if compile_:
        parts.append(f"compile {_number(compile_.get('seconds'), ' s')} "
                     f"({compile_.get('graphs_compiled', 0)} graph(s) compiled, {compile_.get('cache_hits', 0)} "
                     f"from the cache)")
    losses = (summary.get("loss") or {}).get("points") or []
    if losses:
        parts.append(f"loss {_loss(losses[0]['loss'])} -> {_loss(losses[-1]['loss'])}")
    return "; ".join(parts)


def _loss(value: float | None) -> str:
    """A loss as the headline shows it; null in the summary is a loss that was not a number (the job diverged)."""
    return "not a number" if value is None else f"{value:.4g}"

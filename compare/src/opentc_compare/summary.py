"""The job summary: what one job measured, in one JSON file (output/data/job-summary.json, so SageMaker keeps it
in output.tar.gz). The toolkit writes it for every job, compiler on or off, finished, failed or stopped; this
module is the one place its format (JobSummary, format "opentc-job-summary/1"), its check and its one-line
headline are defined.

A summary holds the job's name and outcome, its backend, device, workers and hosts, the versions it ran, its wall
time and when its first optimizer step ended, rank 0's optimizer steps and step times (warm-up left out), its
throughput and where that was measured, its model FLOPs utilisation (or why it has none), its loss series, the
highest peak memory of its workers, what it compiled, what was found wrong with the script or its compilation (each
kind once), and each worker process's own record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import UnionType
from typing import Annotated, Any, TypedDict, Union, cast, get_args, get_origin, get_type_hints

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


def _fits_a_float(value: Any) -> bool:
    try:   # the table scales figures as floats: an int past 1.8e308 would raise OverflowError there
        return math.isfinite(float(value))
    except OverflowError:
        return False


NUMBER = Kind("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and _fits_a_float(v))
WHOLE = Kind("a whole number", lambda v: isinstance(v, int) and not isinstance(v, bool) and _fits_a_float(v))
TEXT = Kind("text", lambda v: isinstance(v, str))
FLAG = Kind("true or false", lambda v: isinstance(v, bool))
KINDS: dict[Any, Kind] = {float: NUMBER, int: WHOLE, str: TEXT, bool: FLAG}


# What the job measured is never below zero, and a figure past these bounds is no job's: refused, so that the
# arithmetic made on them (ratios, costs, break-even, sums over hosts) stays finite and means something.
MAX_SECONDS = 1e9    # about 31 years; SageMaker stops a job after 28 days at most
MAX_AMOUNT = 1e18    # rates, memory and FLOPs: far beyond any machine's
SECONDS = Kind("a number of seconds from 0 to 1e9",
               lambda v: NUMBER.accepts(v) and 0 <= v <= MAX_SECONDS)
COUNT = Kind("a whole number from 0", lambda v: WHOLE.accepts(v) and v >= 0)
AMOUNT = Kind("a number from 0 to 1e18", lambda v: NUMBER.accepts(v) and 0 <= v <= MAX_AMOUNT)
Seconds = Annotated[float, SECONDS]
Count = Annotated[int, COUNT]
Amount = Annotated[float, AMOUNT]


# The format, defined once: the toolkit builds a JobSummary, and a file read here is checked against these types
# (SCHEMA, made from them) before the table and the plot take its types for granted. Every field may be null, and
# missing (total=False: a newer toolkit may add fields, and an older one lack some); a loss point has both of its.
# Annotated[..., "words"] names a value for messages; Annotated[..., KIND] narrows what a value may be.
# Outcome.kind's codes and the words a table shows for each; a code not here (a newer toolkit's) is shown as it is.
OUTCOME_KINDS = {"succeeded": "succeeded", "not_started": "not started", "launch_failed": "launch failed",
                 "script_failed": "failed", "stopped": "stopped", "toolkit_failed": "toolkit failed"}


class Outcome(TypedDict, total=False):
    exit_code: int | None
    succeeded: bool | None
    stopped: bool | None
    headline: str | None
    # A code, not prose (older summaries lack it): succeeded, not_started, launch_failed, script_failed, stopped or
    # toolkit_failed (opentc_toolkit.outcome.OutcomeKind); the failed worker's rank and host where known.
    kind: str | None
    rank: Count | None
    host: str | None


Versions = TypedDict("Versions", {"torch": str | None, "torch-xla": str | None, "transformers": str | None,
                                  "opentc": str | None}, total=False)


class StepSeconds(TypedDict, total=False):
    median: Seconds | None
    p90: Seconds | None
    measured_steps: Count | None
    warmup_steps: Count | None
    compiling_left_out: Count | None   # later steps that compiled a graph, not in median and p90


class Throughput(TypedDict, total=False):
    samples_per_second: Amount | None
    tokens_per_second: Amount | None
    source: str | None          # in words, for a reader; may be reworded
    # The same as a code, which is what a program reads (older summaries lack it: their `source` words are read):
    # "batches" (this host's workers' DataLoader batches, summed over them), "batches_all_hosts" (summed over every
    # host by opentc-compare), "trainer" (the Trainer's own rate, the whole job's)
    source_code: str | None
    trainer_samples_per_second: Amount | None
    trainer_tokens_per_second: Amount | None


class LossPoint(TypedDict):
    step: int | None
    loss: float | None


class Loss(TypedDict, total=False):
    source: str | None          # where the points came from, in words (loss_lines), or null: no training loss found
    points: Annotated[list[LossPoint], "a list of loss points"] | None
    evaluation_lines: Count | None   # lines with an evaluation's loss (`Test set: Average loss`): no points


class Compiled(TypedDict, total=False):
    seconds: Seconds | None
    graphs_compiled: Count | None
    cache_hits: Count | None


class Utilisation(TypedDict, total=False):
    """Model FLOPs utilisation (opentc_launcher.mfu): `mfu` a fraction of the GPU's dense peak, or null with
    `why_not`."""
    mfu: Amount | None
    why_not: str | None
    model: str | None
    dtype: str | None            # what the matrix multiplies ran in: bf16, fp16, tf32, fp32
    dtype_from: str | None
    gpu: str | None
    flops_per_token: Amount | None
    sequence: Amount | None
    tokens_per_second_per_gpu: Amount | None
    peak_tflops: Amount | None
    peak_source: str | None


class HostReads(TypedDict, total=False):
    """Rank 0's device tensors read back by Python (`.item()`, `bool(t)`, `.cpu()`, ...: each one a wait for the
    device on a GPU), per optimizer step after the first (opentc_launcher.host_reads)."""
    per_step: Amount | None                 # the median
    measured_steps: Count | None
    steps_with_reads: Count | None
    counted: str | None                     # what counted as a read on this job, in words
    every_step_at: Annotated[list[str], "a list of places"] | None   # the places that read on (nearly) every step


class Memory(TypedDict, total=False):
    """Rank 0's peak against its device's memory, on a GPU."""
    peak_mb: Amount | None
    device_mb: Amount | None
    share: Amount | None                    # of the device's memory, 0 to 1


class Machine(TypedDict, total=False):
    """The host the summary was written on (opentc_launcher.host.HostFacts): versions as "major.minor"."""
    cpus: Count | None
    gpus: Count | None
    gpu_name: str | None
    gpu_memory_mib: Count | None
    compute_capability: str | None
    bf16: bool | None
    driver: str | None
    driver_cuda: str | None
    torch_cuda: str | None


class JobSummary(TypedDict, total=False):
    format: str
    job_name: str | None
    outcome: Outcome | None
    backend: str | None
    device: str | None
    workers: Count | None
    workers_on_this_host: Count | None
    hosts: Annotated[list[str], "a list of host names"] | None
    current_host: str | None
    machine: Machine | None
    versions: Versions | None
    wall_seconds: Seconds | None
    first_step_seconds: Seconds | None
    optimizer_steps: Count | None
    step_seconds: StepSeconds | None
    throughput: Throughput | None
    utilisation: Utilisation | None
    loss: Loss | None
    peak_memory_mb: Amount | None
    device_memory: Memory | None
    host_reads: HostReads | None
    compile: Compiled | None
    findings: Annotated[list[str], "a list of findings"] | None
    # One worker process's figures each (the launcher's worker record): nothing here reads inside.
    processes: Annotated[list[dict[str, Any]], "a list of objects, one per worker process"] | None


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


def shape_of(annotation: Any, name: str = "") -> Shape:
    """The check for a value of a type of the format's: a kind for a plain type, a Record for a TypedDict (named by
    its fields), a ListOf for a list; `name` (or an Annotated one) names it in messages. None in a union is left out:
    every value may be null."""
    if get_origin(annotation) is Annotated:
        inner, *extras = get_args(annotation)
        if isinstance(extras[0], Kind):
            return extras[0]
        return shape_of(inner, name or extras[0])
    if get_origin(annotation) in (Union, UnionType):
        [inner] = [a for a in get_args(annotation) if a is not type(None)]
        return shape_of(inner, name)
    if annotation in KINDS:
        return KINDS[annotation]
    if get_origin(annotation) is list:
        [item] = get_args(annotation)
        return ListOf(name or "a list", shape_of(item))
    if get_origin(annotation) is dict:
        return Record(name or "an object")
    hints = get_type_hints(annotation, include_extras=True)   # a TypedDict
    return Record(name or "an object {" + ", ".join(hints) + "}", {key: shape_of(hint) for key, hint in hints.items()},
                  required=tuple(key for key in hints if key in annotation.__required_keys__))


SCHEMA = shape_of(JobSummary, "a job summary")


class _Refused(ValueError):
    """A value JSON can write but a summary never holds."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"holds {name}, which is not JSON: a summary has null for a figure that is not a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):   # 1e999 parses to inf
        raise _Refused(f"holds the number {text[:40]}, beyond what a float holds (1.8e308): no figure is that large")
    return value


def load(raw: bytes, where: str) -> JobSummary:
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
    return cast(JobSummary, data)   # what the check has shown


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


def headline(summary: JobSummary) -> str:
    """The job in one line, for the end of its log."""
    steps = summary.get("step_seconds") or StepSeconds()
    throughput = summary.get("throughput") or Throughput()
    compile_ = summary.get("compile")
    workers, optimizer_steps = summary.get("workers"), summary.get("optimizer_steps", 0)
    parts = [f"{summary.get('backend') or 'backend unknown'} on {summary.get('device') or 'a device never chosen'}, "
             + ("workers unknown" if workers is None else f"{workers} worker(s)"),
             "optimizer steps unknown" if optimizer_steps is None else f"{optimizer_steps} optimizer steps",
             f"median step {_number(_ms(steps.get('median')), ' ms')} (p90 {_number(_ms(steps.get('p90')), ' ms')}"
             + (f"; {steps['compiling_left_out']} step(s) that compiled left out)" if steps.get("compiling_left_out")
                else ")")]
    if throughput.get("samples_per_second") is not None:
        parts.append(f"{_number(throughput['samples_per_second'], ' samples/s')}"
                     + (f", {_number(throughput['tokens_per_second'], ' tokens/s', 0)}"
                        if throughput.get("tokens_per_second") is not None else "")
                     + f" ({throughput.get('source')})")
    mfu = (summary.get("utilisation") or Utilisation()).get("mfu")
    if mfu is not None:
        parts.append(f"MFU {mfu:.1%}")
    parts.append(f"first step after {_number(summary.get('first_step_seconds'), ' s')}")
    memory = summary.get("device_memory") or Memory()
    of_device = (f" ({memory['share']:.0%} of the GPU's {_number(memory.get('device_mb'), ' MB', 0)})"
                 if memory.get("share") is not None else "")
    parts.append(f"peak memory {_number(summary.get('peak_memory_mb'), ' MB', 0)}{of_device}")
    reads = (summary.get("host_reads") or HostReads()).get("per_step")
    if reads is not None:
        parts.append(f"{reads:g} host read(s) a step")
    if compile_:
        parts.append(f"compile {_number(compile_.get('seconds'), ' s')} "
                     f"({compile_.get('graphs_compiled', 0)} graph(s) compiled, {compile_.get('cache_hits', 0)} "
                     f"from the cache)")
    parts.append(_loss_part(summary.get("loss") or Loss()))
    return "; ".join(parts)


def _loss_part(loss: Loss) -> str:
    """The loss curve's ends and where they came from, or that the log had no training loss (and how many evaluation
    lines it left out, which are not one)."""
    points = loss.get("points") or []
    left_out = loss.get("evaluation_lines") or 0
    evaluations = f"{left_out} evaluation line{'' if left_out == 1 else 's'} left out"
    if not points:
        return "no training loss in the log" + (f" ({evaluations})" if left_out else "")
    source = loss.get("source") or "the log"
    return (f"loss {_loss(points[0]['loss'])} -> {_loss(points[-1]['loss'])} (from {source}"
            + (f"; {evaluations})" if left_out else ")"))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _loss(value: float | None) -> str:
    """A loss as the headline shows it; null in the summary is a loss that was not a number (the job diverged)."""
    return "not a number" if value is None else f"{value:.4g}"

"""What one worker measured, as it leaves it for the job summary: <summary dir>/worker-<process>.json. The one
definition of the record, for the worker that writes it (worker_session) and the front end that reads it (the
SageMaker toolkit's job summary)."""

from __future__ import annotations

import glob
import json
import logging
import os
from typing import TypedDict, cast

from .files import write_json
from .host_reads import HostReadFigures
from .process_group import ProcessGroupFigures

log = logging.getLogger("opentc_launcher")


class StepTimes(TypedDict):
    """Seconds between optimizer steps once warm (measurements.step_statistics)."""

    measured_steps: int
    warmup_steps: int     # the steps left out: the warm-up asked for, or all but the first when there were too few
    median: float | None
    p90: float | None
    compiling_left_out: int          # later steps that compiled a graph, left out of median and p90
    slowest_left_out: float | None   # the longest of them, seconds


class Rates(TypedDict):
    """What the worker's DataLoaders handed out per second after warm-up (measurements.BatchWatch)."""

    samples_per_second: float
    tokens_per_second: float | None   # None: no batch of integer ids


class CompiledFigures(TypedDict):
    seconds: float | None
    graphs_compiled: int | None
    cache_hits: int


class CompileFinding(TypedDict):
    kind: str   # a job summary keeps one of each kind (compile_report)
    text: str


class ModelFigures(TypedDict):
    """The model the worker saw trained (model_watch), for the job's MFU (mfu.job_utilisation)."""

    name: str                     # its class
    seen_by: str                  # where the worker saw it
    weights: int                  # what 6N counts: shared tensors once, learned position tables left out
    layers: int | None            # None: no transformer config says
    width: int | None
    matmul_dtype: str             # bf16, fp16, tf32 or fp32
    dtype_from: str               # how that was known


class WorkerRecord(TypedDict):
    process: str                  # rank<N>, or rank<N>-spawned<K>
    rank: int
    world_size: int
    backend: str
    device: str
    exit_code: int
    optimizer_steps: int
    first_step_at: float | None   # time.time() at the end of its first optimizer step
    step_seconds: StepTimes
    throughput: Rates | None
    peak_memory_mb: float
    peak_memory_kind: str         # what measured it
    device_memory_mb: float | None   # the memory of the GPU it used; None on a CPU
    compile: CompiledFigures | None   # None: a backend that compiles nothing
    findings: list[str]           # what the worker found wrong with the script
    compile_findings: list[CompileFinding]
    model: ModelFigures | None    # None: no model seen, or none that trains
    host_reads: HostReadFigures | None   # device tensors read back per optimizer step; None: not watched
    children_cpu_seconds: float   # of the processes the script started and waited for (measurements.children_usage)
    children_peak_memory_mb: float
    process_group: ProcessGroupFigures | None   # the largest torch.distributed group it was seen in; None: none
    cpu_seconds: float            # this process's own (measurements.own_cpu_seconds), against its children's
    last_step_at: float | None    # time.time() at the end of its last optimizer step


def record_path(folder: str, process: str) -> str:
    return os.path.join(folder, f"worker-{process}.json")


def write_record(folder: str, record: WorkerRecord) -> None:
    """The record in `folder`; a failure is logged, never raised."""
    if not folder:
        return
    path = record_path(folder, record["process"])
    try:
        write_json(path, record)
    except OSError as e:
        log.warning("%s: could not write its measurements to %s: %s", record["process"], path, e)


def read_records(folder: str) -> list[WorkerRecord]:
    """Every worker's record in `folder`, by rank; one that cannot be read is logged and left out."""
    found: list[WorkerRecord] = []
    for path in sorted(glob.glob(record_path(folder, "*"))):
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError) as e:
            log.warning("job summary: %s could not be read (%s)", path, e)
            continue
        if isinstance(record, dict):
            found.append(cast(WorkerRecord, record))   # written by worker_session from this type
        else:
            log.warning("job summary: %s is not a worker's record (a JSON object)", path)
    return sorted(found, key=lambda r: (r.get("rank", 0), r.get("process", "")))

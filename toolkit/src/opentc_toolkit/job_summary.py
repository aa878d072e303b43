"""Each job's measured summary: output/data/job-summary.json (so SageMaker keeps it in output.tar.gz), for every
job, compiler on or off, finished, failed or stopped (with what was known by then), and its headline as the log's
last line before the verdict. `opentc-compare` reads it (its format: opentc_compare.summary).

The figures come from three places: this process (the job's wall time and what the job is), the workers' records
(opentc_launcher.measurements: steps, step times, throughput from batch shapes, peak memory, compilation), and
the lines the workers printed (loss_lines: the loss series and the Trainer's own throughput). A summary is never a
reason for a job to fail: anything that goes wrong here is logged and the job's verdict stands.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from opentc_compare.hosts import BATCHES, BATCHES_CODE, from_batches
from opentc_compare.summary import (
    FILE_NAME,
    FORMAT,
    Compiled,
    HostReads,
    JobSummary,
    Machine,
    Memory,
    StepSeconds,
    Throughput,
    Utilisation,
    Versions,
    headline,
)
from opentc_compare.summary import Outcome as JobOutcome
from opentc_launcher.api import WorkerRecord, WorkingCopy, job_utilisation, read_records
from opentc_launcher.common import installed_version, write_json

from .job import JobPaths, TrainingJob
from .job_settings import JobSettings
from .loss_lines import LossLines
from .outcome import Outcome
from .plan import LaunchPlan

log = logging.getLogger(__name__)

# Where the throughput comes from (docs/did-it-pay.md): the batches torch's DataLoaders handed out after warm-up
# (BATCHES, the words opentc-compare sums hosts by), else the Trainer's own train_samples_per_second, over its whole
# run (compilation included).
TRAINER_RATE = "the Trainer's train_samples_per_second, whole run"
TRAINER_CODE = "trainer"


@dataclass
class JobRecorder:
    """What the job's run learns about it as it goes, for its summary."""

    started: float = field(default_factory=time.time)            # the wall clock, as the workers' records are
    started_monotonic: float = field(default_factory=time.monotonic)   # the job's own length, whatever the clock does
    lines: LossLines = field(default_factory=LossLines)
    job: TrainingJob | None = None
    settings: JobSettings | None = None
    plan: LaunchPlan | None = None
    cache: WorkingCopy | None = None     # the working copy of the compilation cache, when the backend uses one


def _throughput(records: list[WorkerRecord], trainer: dict[str, float]) -> Throughput:
    rates = [rate for r in records if (rate := r.get("throughput"))]
    trainer_samples = trainer.get("train_samples_per_second")
    result = Throughput(samples_per_second=None, tokens_per_second=None, source=None, source_code=None,
                        trainer_samples_per_second=trainer_samples,
                        trainer_tokens_per_second=trainer.get("train_tokens_per_second"))
    if rates:   # data parallel: the host's workers together
        tokens = [t for r in rates if (t := r.get("tokens_per_second"))]
        result["samples_per_second"] = sum(r["samples_per_second"] for r in rates)
        result["tokens_per_second"] = sum(tokens) if tokens else None
        result["source"], result["source_code"] = BATCHES, BATCHES_CODE
    elif trainer_samples is not None:
        result["samples_per_second"] = trainer_samples
        result["tokens_per_second"] = trainer.get("train_tokens_per_second")
        result["source"], result["source_code"] = TRAINER_RATE, TRAINER_CODE
    return result


def _utilisation(first: WorkerRecord | None, device: str | None, gpu: str | None, throughput: Throughput,
                 workers_on_this_host: int | None) -> Utilisation:
    """MFU from rank 0's model and this host's throughput, measured from the batches only: the Trainer's own rate
    includes compilation."""
    measured = from_batches(throughput)
    return cast(Utilisation, job_utilisation(
        first.get("model") if first else None, device, gpu,
        throughput.get("tokens_per_second") if measured else None,
        throughput.get("samples_per_second") if measured else None, workers_on_this_host or 1))


# A script that starts its own workers (AWS's launch_pt_dt_sm_native.py runs torch.distributed.launch from inside the
# entry point) trains in processes the launcher does not see: the worker counts no step, or a few of its own (a check
# before it launches), while its children worked.
SELF_LAUNCHED_CPU_SECONDS = 2.0
# Loss lines a worker's own last step may print after it ends (the Trainer's log line of that step); more than this
# coming later than LATE_LINE_SECONDS after it were printed by processes still training.
OWN_LATE_LINES = 1
LATE_LINE_SECONDS = 1.0


def self_launched(record: WorkerRecord | None,
                  loss_lines_after: Callable[[float], int] = lambda moment: 0) -> str | None:
    """Why this summary cannot count the job's workers and steps, when the script trained in processes of its own:
    they used CPU (SELF_LAUNCHED_CPU_SECONDS or more) while the worker counted no optimizer step, or they used more
    of it than the worker itself and loss lines kept coming after its last step (`loss_lines_after(t)`: how many came
    after time.time() t). A worker that trained beside helpers of its own (DataLoader workers, a tokenizer pool) prints
    no loss lines after its last step, and is counted as it is."""
    if not record:
        return None
    children = record.get("children_cpu_seconds") or 0
    steps = record.get("optimizer_steps") or 0
    if children < SELF_LAUNCHED_CPU_SECONDS:
        return None
    if steps:
        own, last = record.get("cpu_seconds"), record.get("last_step_at")
        if own is None or last is None or children <= own:
            return None
        later = loss_lines_after(last + LATE_LINE_SECONDS)
        if later <= OWN_LATE_LINES:
            return None
        seen = (f"while the launcher's worker counted {steps} optimizer step(s) of its own and used {own:.0f} CPU-"
                f"seconds, and {later} loss lines came after its last step")
    else:
        seen = "while the launcher's worker saw no optimizer step"
    return (f"the script started processes of its own that did the work ({children:.0f} CPU-seconds, {seen}): they "
            f"are not the launcher's workers, so this summary cannot count their workers, optimizer steps, step times "
            f"or throughput from batches, and shows them as unknown. To fix: let the image start the workers: make "
            f"the training script the entry point (sagemaker_program) and ask for one worker per GPU with the "
            f"distribution (torch_distributed, or pytorchxla with the compiler), not with a launcher script of your "
            f"own.")


NEVER_MET_FIX = ("have the script form one process group for all of them and train through it: "
                 "torch.distributed.init_process_group() (each worker has RANK, WORLD_SIZE, MASTER_ADDR and "
                 "MASTER_PORT; gloo on CPUs, nccl on GPUs) and DistributedDataParallel(model), or the Trainer or "
                 "Accelerate, which do both themselves; a Lightning Trainer needs devices and num_nodes to match the "
                 "workers; with one process per host and no distribution, init_process_group(backend, "
                 "rank=hosts.index(current_host), world_size=len(hosts)). If separate copies are what you want, run "
                 "one worker")


def never_met(records: list[WorkerRecord], workers: int) -> str | None:
    """The finding of a job of several workers (`workers`, on every host) whose workers here took optimizer steps
    without ever being in a process group of more than one: each trained its own copy. None when they met, when
    none trained, or for records that do not say (written before workers looked)."""
    if workers < 2 or not records or not all("process_group" in r for r in records):
        return None
    if any(group["world_size"] > 1 for r in records if (group := r.get("process_group"))):
        return None
    steps = max(r.get("optimizer_steps") or 0 for r in records)
    if not steps:
        return None
    here = len(records)
    return (f"{workers} workers, no process group: each trained its own copy. This host's {here} worker"
            f"{'' if here == 1 else 's'} took optimizer steps (up to {steps}) without ever being in a "
            f"torch.distributed process group with another process (looked for at the first optimizer step and at "
            f"the end), so no gradient was shared: the job trained {workers} separate models, each on the data its "
            f"own process read, and this summary's figures are one copy's. To fix: {NEVER_MET_FIX}.")


def findings(records: list[WorkerRecord]) -> list[str]:
    """What the workers found wrong with the script (an optimizer that trains nothing), each once, then what their
    compile reports found (host reads, graph breaks, recompilation, CPU fallbacks), one of each kind: the lowest
    rank's, which says where."""
    script = sorted({f for r in records for f in r.get("findings") or []})
    compiled: dict[str, str] = {}
    for record in records:   # by rank
        for found in record.get("compile_findings") or []:
            compiled.setdefault(found.get("kind") or found.get("text", ""),
                                f"compile report of {record.get('process')}: {found.get('text')}")
    return script + list(compiled.values())


def _step_seconds(record: WorkerRecord | None) -> StepSeconds:
    times = record.get("step_seconds") if record else None
    if not times:
        return StepSeconds(median=None, p90=None, measured_steps=0)
    return StepSeconds(median=times.get("median"), p90=times.get("p90"), measured_steps=times.get("measured_steps"),
                       warmup_steps=times.get("warmup_steps"), compiling_left_out=times.get("compiling_left_out"))


def _host_reads(record: WorkerRecord | None) -> HostReads | None:
    reads = record.get("host_reads") if record else None
    if not reads:
        return None
    return HostReads(per_step=reads.get("per_step_median"), measured_steps=reads.get("measured_steps"),
                     steps_with_reads=reads.get("steps_with_reads"), counted=reads.get("counted"),
                     every_step_at=[site["where"] for site in reads.get("per_step_sites") or []])


def _device_memory(record: WorkerRecord | None) -> Memory | None:
    device, peak = (record.get("device_memory_mb"), record.get("peak_memory_mb")) if record else (None, None)
    if not device or peak is None:
        return None
    return Memory(peak_mb=peak, device_mb=device, share=round(peak / device, 4))


def _compiled(record: WorkerRecord | None) -> Compiled | None:
    figures = record.get("compile") if record else None
    if not figures:
        return None
    return Compiled(seconds=figures.get("seconds"), graphs_compiled=figures.get("graphs_compiled"),
                    cache_hits=figures.get("cache_hits"))


def run_times(recorder: JobRecorder, first_steps: list[float]) -> tuple[float, float | None]:
    """The job's wall time so far, and the time to its first optimizer step (`first_steps`: the workers' wall-clock
    readings), in seconds. A clock set during the job (NTP) would make the second a figure nobody measured, negative or
    longer than the job: None then."""
    wall = round(time.monotonic() - recorder.started_monotonic, 3)
    first = round(min(first_steps) - recorder.started, 3) if first_steps else None
    return wall, first if first is not None and 0 <= first <= wall else None


def build_summary(paths: JobPaths, recorder: JobRecorder, outcome: Outcome, gpu: str | None = None) -> JobSummary:
    """The summary; `gpu` the GPU's name (read from the driver when the job ran on GPUs)."""
    job, settings, plan = recorder.job, recorder.settings, recorder.plan
    records = read_records(plan.options.summary_dir) if plan and plan.options.summary_dir else []
    first = records[0] if records else None
    first_steps = [at for r in records if (at := r.get("first_step_at"))]
    memory = [mb for r in records if (mb := r.get("peak_memory_mb")) is not None]
    device = plan.options.device if plan else None
    # a job that failed first is said as it is
    unseen = self_launched(first, recorder.lines.arrived_after) if outcome.succeeded else None
    if unseen and device == "cpu":   # the processes that trained: their peak resident memory is theirs
        memory += [r.get("children_peak_memory_mb") or 0.0 for r in records]
    throughput = _throughput(records, recorder.lines.trainer_rates())
    wall_seconds, first_step_seconds = run_times(recorder, first_steps)
    # Every process of the job: a multi-worker world, or one process on each host (contract.py).
    processes = (plan.world.size if plan.world.size > 1 else len(job.hosts)) if plan and job else 1
    apart = None if unseen else never_met(records, processes)
    if apart:
        log.warning("%s", apart)
    return JobSummary(
        format=FORMAT,
        job_name=(job.job_name if job else None) or os.path.basename(os.path.normpath(paths.base)),
        outcome=JobOutcome(exit_code=outcome.exit_code, succeeded=outcome.succeeded, stopped=outcome.stopped,
                           headline=outcome.message.split("\n", 1)[0] or None, kind=outcome.kind.value,
                           rank=outcome.rank, host=outcome.host),
        backend=settings.backend_name if settings else None,
        device=device,
        workers=plan.world.size if plan and not unseen else None,
        workers_on_this_host=plan.world.workers_per_host if plan else None,
        hosts=list(job.hosts) if job else [],
        current_host=job.current_host if job else None,
        machine=cast(Machine, job.machine.record()) if job else None,
        versions=Versions({"torch": installed_version("torch"), "torch-xla": installed_version("torch-xla"),
                           "transformers": installed_version("transformers"),
                           "opentc": installed_version("opentc-toolkit")}),
        wall_seconds=wall_seconds,
        first_step_seconds=first_step_seconds,
        optimizer_steps=None if unseen else first.get("optimizer_steps", 0) if first else 0,
        step_seconds=_step_seconds(None if unseen else first),
        throughput=throughput,
        utilisation=_utilisation(first, device, gpu, throughput, plan.world.workers_per_host if plan else None),
        loss=recorder.lines.loss(),
        peak_memory_mb=max(memory) if memory else None,
        device_memory=_device_memory(first),
        host_reads=_host_reads(None if unseen else first),
        compile=_compiled(first),
        findings=([unseen] if unseen else []) + ([apart] if apart else []) + findings(records),
        processes=[dict(record) for record in records],
    )


def write_summary(paths: JobPaths, recorder: JobRecorder, outcome: Outcome) -> JobSummary | None:
    """output/data/job-summary.json and its headline in the log. Never raises."""
    try:
        device = recorder.plan.options.device if recorder.plan else None
        gpu = recorder.job.machine.gpu_name if recorder.job else None
        summary = build_summary(paths, recorder, outcome, gpu if device and device.startswith("cuda") else None)
        path = os.path.join(paths.output_data, FILE_NAME)
        write_json(path, summary, indent=2)
    except Exception as e:  # noqa: BLE001  (the summary is never a reason for a job to fail)
        log.warning("job summary not written: %s: %s", type(e).__name__, e)
        return None
    try:
        line = headline(summary)
    except Exception as e:  # noqa: BLE001  (nor is its headline)
        line = f"(no headline: {type(e).__name__}: {e})"
    hosts = summary.get("hosts") or []
    if len(hosts) > 1:   # each host measures its own workers; the job is all of them (before the headline: last)
        log.info("this host's summary (%s of %d: %s); opentc-compare given every host's summary shows the job as one",
                 summary.get("current_host"), len(hosts), ", ".join(hosts))
    log.info("job summary: %s (%s)", line, path)
    return summary

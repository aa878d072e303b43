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
    processes            per worker process: rank, optimizer_steps, peak_memory_mb, peak_memory_kind, compile ...
"""

from __future__ import annotations

import json
from typing import Any

FORMAT = "opentc-job-summary/1"
FILE_NAME = "job-summary.json"


class NotASummary(ValueError):
    """A file that is not a job summary this version reads; the message says what it is instead."""


def load(text: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise NotASummary(f"{where} is not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise NotASummary(f"{where} is not a job summary of format {FORMAT} (its format: {found!r})")
    return data


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
        parts.append(f"loss {losses[0]['loss']:.4g} -> {losses[-1]['loss']:.4g}")
    return "; ".join(parts)

"""The comparison as a table: one column per job, the first job the reference for the ratios."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from .economics import break_even, cost, saving
from .inputs import Job
from .summary import OUTCOME_KINDS, JobSummary

Getter = Callable[[JobSummary], Any]
MAX_RATIO = 1e6   # a ratio to the first job is shown up to this, then as a bound


def _get(*keys: str) -> Getter:
    def get(summary: JobSummary) -> Any:
        value: Any = summary
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value
    return get


def _fmt(value: Any, digits: int = 1, scale: float = 1.0) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = value * scale
        return f"{number:,.{digits}f}" if digits else f"{number:,.0f}"
    return _cell(str(value))


def _cell(text: str) -> str:
    """Text from a summary as a table cell: control characters (a terminal's escape sequences, line breaks) as JSON
    escapes, and | escaped so that it cannot split the row."""
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text).replace("|", "\\|")


def _ratio(first: float | None, this: float | None, faster_when_lower: bool) -> str:
    if not first or not this:
        return "-"
    ratio = first / this if faster_when_lower else this / first
    return f"{ratio:.2f}x" if ratio <= MAX_RATIO else f">{MAX_RATIO:,.0f}x"   # 1e9 / 1e-300 is no 300-digit figure


def _outcome(summary: JobSummary) -> str:
    outcome = summary.get("outcome") or {}
    if outcome.get("succeeded"):
        return "succeeded"
    code = outcome.get("exit_code")
    kind = outcome.get("kind")   # older summaries have none: stopped or failed, from the flags
    said = OUTCOME_KINDS.get(kind, kind) if kind else ("stopped" if outcome.get("stopped") else "failed")
    return f"{said} (exit code {'unknown' if code is None else code})"


def _workers(summary: JobSummary) -> str | None:
    """"2 (1)": the job's worker processes and its hosts, each "-" when the summary does not say."""
    workers, hosts = summary.get("workers"), len(summary.get("hosts") or [])
    if workers is None and not hosts:
        return None
    return f"{'-' if workers is None else workers} ({hosts or '-'})"


def _final_loss(summary: JobSummary) -> Any:
    points = _get("loss", "points")(summary) or []
    return points[-1]["loss"] if points else None


# (row name, value, digits, scale, ratio: None, or (its name, lower is better))
ROWS: tuple[tuple[str, Getter, int, float, tuple[str, bool] | None], ...] = (
    ("outcome", _outcome, 0, 1.0, None),
    ("device", _get("device"), 0, 1.0, None),
    ("workers (hosts)", lambda s: _workers(s), 0, 1.0, None),
    ("torch", _get("versions", "torch"), 0, 1.0, None),
    ("torch-xla", _get("versions", "torch-xla"), 0, 1.0, None),
    ("transformers", _get("versions", "transformers"), 0, 1.0, None),
    ("wall time (s)", _get("wall_seconds"), 1, 1.0, ("wall time vs first", False)),
    ("first optimizer step after (s)", _get("first_step_seconds"), 1, 1.0, None),
    ("optimizer steps", _get("optimizer_steps"), 0, 1.0, None),
    ("median step (ms)", _get("step_seconds", "median"), 1, 1000.0, ("speed vs first (median step)", True)),
    ("p90 step (ms)", _get("step_seconds", "p90"), 1, 1000.0, None),
    ("samples/s", _get("throughput", "samples_per_second"), 1, 1.0, ("samples/s vs first", False)),
    ("tokens/s", _get("throughput", "tokens_per_second"), 0, 1.0, ("tokens/s vs first", False)),
    ("MFU (% of the GPU's dense peak)", _get("utilisation", "mfu"), 1, 100.0, None),
    ("throughput measured from", _get("throughput", "source"), 0, 1.0, None),
    ("Trainer's samples/s (whole run)", _get("throughput", "trainer_samples_per_second"), 1, 1.0, None),
    ("final loss", _final_loss, 4, 1.0, None),
    ("peak memory (MB)", _get("peak_memory_mb"), 0, 1.0, ("peak memory vs first", False)),
    ("peak of the GPU's memory (%)", _get("device_memory", "share"), 0, 100.0, None),
    ("host reads a step (median)", _get("host_reads", "per_step"), 1, 1.0, None),
    ("compile (s)", _get("compile", "seconds"), 1, 1.0, None),
    ("graphs compiled", _get("compile", "graphs_compiled"), 0, 1.0, None),
    ("loaded from the cache", _get("compile", "cache_hits"), 0, 1.0, None),
)


def unique_labels(jobs: Sequence[Job]) -> list[str]:
    labels = [job.label for job in jobs]
    return [label if labels.count(label) == 1 else f"{label} #{i + 1}" for i, label in enumerate(labels)]


def render(jobs: Sequence[Job], price_per_hour: float | None = None) -> str:
    """A markdown table: a row per figure, a column per job; ratio rows compare each job with the first. With a price
    per instance-hour, each job's cost and its saving against the first; where an eager and a compiled job are
    compared, the break-even (economics.py). The findings of every job follow the table."""
    labels = unique_labels(jobs)
    lines = ["| | " + " | ".join(map(_cell, labels)) + " |", "|---|" + "---|" * len(jobs)]
    first = jobs[0].summary
    for name, get, digits, scale, ratio in ROWS:
        values = [get(job.summary) for job in jobs]
        if all(v is None for v in values):
            continue
        lines.append(f"| {name} | " + " | ".join(_fmt(v, digits, scale) for v in values) + " |")
        if ratio is not None and len(jobs) > 1:
            ratio_name, lower_is_better = ratio
            lines.append(f"| {ratio_name} | " + " | ".join(
                _ratio(get(first), get(job.summary), lower_is_better) for job in jobs) + " |")
    if price_per_hour is not None:
        costs = [cost(job.summary, price_per_hour) for job in jobs]
        lines.append(f"| cost (USD at {price_per_hour:g}/h per host) | " + " | ".join(_fmt(c, 4) for c in costs) + " |")
        if len(jobs) > 1:
            lines.append("| saving vs first (USD) | - | " + " | ".join(saving(costs[0], c) for c in costs[1:]) + " |")
    if len(jobs) > 1:
        pairs = ["-"] + [break_even(first, job.summary) for job in jobs[1:]]
        if any(p != "-" for p in pairs):
            lines.append("| compile paid back vs first after | " + " | ".join(map(_cell, pairs)) + " |")
    return "\n".join(lines + mfu_notes(jobs, labels) + findings(jobs, labels))


def mfu_notes(jobs: Sequence[Job], labels: Sequence[str]) -> list[str]:
    """Where some jobs have an MFU and others not, why not (a job on a CPU, a GPU not in the table, ...)."""
    utilisations = [job.summary.get("utilisation") or {} for job in jobs]
    if not any(u.get("mfu") is not None for u in utilisations):
        return []
    missing = [f"- {_cell(label)}: {_cell(u.get('why_not') or 'not measured (a summary from before MFU)')}"
               for label, u in zip(labels, utilisations, strict=True) if u.get("mfu") is None]
    return ["", "No MFU:", *missing] if missing else []


def findings(jobs: Sequence[Job], labels: Sequence[str]) -> list[str]:
    """The jobs' findings, under the table: what the workers and the compile reports found."""
    found = [f"- {_cell(label)}: {_cell(text)}" for job, label in zip(jobs, labels, strict=True)
             for text in job.summary.get("findings") or []]
    return ["", "Findings:", *found] if found else []

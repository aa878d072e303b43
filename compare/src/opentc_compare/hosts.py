"""The hosts of one job as one job. A multi-host job writes one summary per host, each with its own workers'
figures; opentc-compare shows the job as one column, merged from them.

Summaries are hosts of one job when they have the same job_name and the same `hosts` list of more than one host,
each naming a different one of them as its current_host. No flag asks for it: SageMaker's job names are unique (in
an account and region), so two summaries with one name and one host list are one job's. The same host of the same
job twice is bad input (InputError); a job some of whose hosts were not given is still merged, and its label says
which are missing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from .inputs import InputError, Job
from .summary import JobSummary, Outcome, Throughput

# The source the toolkit's job summary names (job_summary.py imports it from here): throughput from the batches the
# host's own workers were handed, summed over them, so that the job's is the sum over its hosts. The other source, the
# Trainer's train_samples_per_second, already counts every process of the job (its batch size times the world size),
# and only the leader's workers print it.
BATCHES = "batch shapes, steady state"
BATCHES_CODE, BATCHES_ALL_HOSTS_CODE = "batches", "batches_all_hosts"


def from_batches(throughput: Throughput) -> bool:
    """Whether one host's throughput is its workers' batches: by its code, or in an older summary by its words."""
    code = throughput.get("source_code")
    return code == BATCHES_CODE if code is not None else throughput.get("source") == BATCHES

MISSING_NAMED = 3   # a label names this many missing hosts at most, then counts the rest

Key = tuple[str, tuple[str, ...]]   # (job_name, hosts)


def merge_hosts(jobs: Sequence[Job]) -> list[Job]:
    """`jobs` in the order given, the hosts of each multi-host job merged into one Job where its first host was (so
    that the first job stays the reference for the ratios). InputError when a host of a job is given twice."""
    slots: list[Job | Key] = []
    groups: dict[Key, list[Job]] = {}
    for job in jobs:
        key = _key(job)
        if key is None:
            slots.append(job)
            continue
        if key not in groups:
            groups[key] = []
            slots.append(key)
        host = job.summary["current_host"]
        for other in groups[key]:
            if other.summary["current_host"] == host:
                raise InputError(f"{other.source} and {job.source} are the same host, {json.dumps(host)}, of job "
                                 f"{json.dumps(key[0])}: pass each host's summary once.")
        groups[key].append(job)
    return [slot if isinstance(slot, Job) else merged(groups[slot]) for slot in slots]


def _key(job: Job) -> Key | None:
    """The job and host list a summary is one host of, when it is one of a multi-host job's."""
    name, hosts = job.summary.get("job_name"), job.summary.get("hosts") or []
    if not name or len(set(hosts)) < 2 or job.summary.get("current_host") not in hosts:
        return None
    return name, tuple(hosts)


def merged(given: Sequence[Job]) -> Job:
    """One job from summaries of its hosts (the same job_name and hosts; each its own current_host)."""
    hosts = list(dict.fromkeys(given[0].summary.get("hosts") or []))
    by_host = {job.summary["current_host"]: job.summary for job in given}
    summaries = [by_host[host] for host in hosts if host in by_host]   # in the job's order of hosts
    missing = [host for host in hosts if host not in by_host]
    # What one process measured (the loss, optimizer steps, step times, compile) is rank 0's, on the leader.
    leader = by_host.get(hosts[0], given[0].summary)
    # The leader's, its nested objects replaced, never changed: the inputs' stay as read.
    summary: JobSummary = {
        **leader,
        "current_host": None, "workers_on_this_host": None,
        "outcome": _outcome(summaries),
        # The job ends when its last host does. (A partial job's times and memory are lower bounds; its label says.)
        "wall_seconds": _largest(summaries, "wall_seconds"),
        # The latest host's: with data parallelism, the job has made its first step when every host has (each
        # host's figure is its own first worker's), and a host that compiled longer (a cold cache) held all back.
        "first_step_seconds": _largest(summaries, "first_step_seconds"),
        "peak_memory_mb": _largest(summaries, "peak_memory_mb"),
        "throughput": _throughput(leader, summaries, len(hosts)),
        "processes": [process for s in summaries for process in s.get("processes") or []],
        "findings": sorted({f for s in summaries for f in s.get("findings") or []}),
    }
    if missing:
        named = ", ".join(missing[:MISSING_NAMED]) + (f" and {len(missing) - MISSING_NAMED} more"
                                                       if len(missing) > MISSING_NAMED else "")
        hosts_given = f"{len(summaries)} of {len(hosts)} hosts: {named} missing"
    else:
        hosts_given = f"all {len(hosts)} hosts"
    return Job(name=given[0].name, source=" + ".join(job.source for job in given), summary=summary,
               hosts_given=hosts_given)


def _largest(summaries: Sequence[JobSummary], field: Literal["wall_seconds", "first_step_seconds",
                                                              "peak_memory_mb"]) -> float | None:
    """The largest of the hosts' figures (null where no host has one)."""
    values = [value for s in summaries if (value := s.get(field)) is not None]
    return max(values) if values else None


def _outcome(summaries: Sequence[JobSummary]) -> Outcome:
    """Succeeded when every host did; the exit code and headline of the first host that failed, else the leader's."""
    outcomes = [s.get("outcome") or Outcome() for s in summaries]
    failed = [o for o in outcomes if o.get("exit_code") not in (0, None)]
    shown = (failed or outcomes)[0]
    return Outcome(exit_code=shown.get("exit_code"), succeeded=all(o.get("succeeded") is True for o in outcomes),
                   stopped=any(o.get("stopped") is True for o in outcomes), headline=shown.get("headline"),
                   kind=shown.get("kind"), rank=shown.get("rank"), host=shown.get("host"))


def _throughput(leader: JobSummary, summaries: Sequence[JobSummary], hosts: int) -> Throughput | None:
    """The job's throughput: the hosts' summed when each host's counts its own workers (only when every host of the
    job has one: a sum over some hosts is not the job's, and its ratio would read as a slowdown); else the leader's
    (the Trainer's rate counts the whole job already)."""
    throughput = leader.get("throughput")
    if not throughput or not from_batches(throughput):
        return throughput
    rates = [s.get("throughput") or Throughput() for s in summaries]
    if len(summaries) < hosts:
        unsummed = f"only {len(summaries)} of {hosts} hosts given"
    elif any(not from_batches(r) or r.get("samples_per_second") is None for r in rates):
        unsummed = "not every host measured it"
    else:
        tokens = [t for r in rates if (t := r.get("tokens_per_second")) is not None]
        return {**throughput, "samples_per_second": sum(r.get("samples_per_second") or 0.0 for r in rates),
                "tokens_per_second": sum(tokens) if len(tokens) == len(rates) else None,
                "source": f"{BATCHES}, all hosts", "source_code": BATCHES_ALL_HOSTS_CODE}
    return {**throughput, "samples_per_second": None, "tokens_per_second": None,
            "source": f"{BATCHES}: not summed, {unsummed}"}

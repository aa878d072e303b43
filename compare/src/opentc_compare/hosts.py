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
from collections.abc import Callable, Sequence
from typing import Any

from .inputs import InputError, Job

# The source the toolkit's job summary names (job_summary.py imports it from here): throughput from the batches the
# host's own workers were handed, summed over them, so that the job's is the sum over its hosts. The other source, the
# Trainer's train_samples_per_second, already counts every process of the job (its batch size times the world size),
# and only the leader's workers print it.
BATCHES = "batch shapes, steady state"
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
    hosts = list(dict.fromkeys(given[0].summary["hosts"]))
    by_host = {job.summary["current_host"]: job.summary for job in given}
    summaries = [by_host[host] for host in hosts if host in by_host]   # in the job's order of hosts
    missing = [host for host in hosts if host not in by_host]
    # What one process measured (the loss, optimizer steps, step times, compile) is rank 0's, on the leader.
    leader = by_host.get(hosts[0], given[0].summary)
    summary = dict(leader)   # its nested objects are replaced, never changed: the inputs' stay as read
    summary.update(
        current_host=None, workers_on_this_host=None,
        outcome=_outcome(summaries),
        # The job ends when its last host does. (A partial job's times and memory are lower bounds; its label says.)
        wall_seconds=_over(summaries, "wall_seconds", max),
        # The latest host's: with data parallelism, the job has made its first step when every host has (each
        # host's figure is its own first worker's), and a host that compiled longer (a cold cache) held all back.
        first_step_seconds=_over(summaries, "first_step_seconds", max),
        peak_memory_mb=_over(summaries, "peak_memory_mb", max),
        throughput=_throughput(leader, summaries, len(hosts)),
        processes=[process for s in summaries for process in s.get("processes") or []],
        findings=sorted({f for s in summaries for f in s.get("findings") or []}),
    )
    if missing:
        named = ", ".join(missing[:MISSING_NAMED]) + (f" and {len(missing) - MISSING_NAMED} more"
                                                       if len(missing) > MISSING_NAMED else "")
        hosts_given = f"{len(summaries)} of {len(hosts)} hosts: {named} missing"
    else:
        hosts_given = f"all {len(hosts)} hosts"
    return Job(name=given[0].name, source=" + ".join(job.source for job in given), summary=summary,
               hosts_given=hosts_given)


def _over(summaries: Sequence[dict[str, Any]], field: str, pick: Callable[[list[Any]], Any]) -> Any:
    values = [s[field] for s in summaries if s.get(field) is not None]
    return pick(values) if values else None


def _outcome(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Succeeded when every host did; the exit code and headline of the first host that failed, else the leader's."""
    outcomes = [s.get("outcome") or {} for s in summaries]
    failed = [o for o in outcomes if o.get("exit_code") not in (0, None)]
    shown = (failed or outcomes)[0]
    return {"exit_code": shown.get("exit_code"), "succeeded": all(o.get("succeeded") is True for o in outcomes),
            "stopped": any(o.get("stopped") is True for o in outcomes), "headline": shown.get("headline")}


def _throughput(leader: dict[str, Any], summaries: Sequence[dict[str, Any]], hosts: int) -> dict[str, Any] | None:
    """The job's throughput: the hosts' summed when each host's counts its own workers (only when every host of the
    job has one: a sum over some hosts is not the job's, and its ratio would read as a slowdown); else the leader's
    (the Trainer's rate counts the whole job already)."""
    throughput = leader.get("throughput")
    if not throughput or throughput.get("source") != BATCHES:
        return throughput
    rates = [s.get("throughput") or {} for s in summaries]
    result = dict(throughput)
    if len(summaries) < hosts:
        unsummed = f"only {len(summaries)} of {hosts} hosts given"
    elif any(r.get("source") != BATCHES or r.get("samples_per_second") is None for r in rates):
        unsummed = "not every host measured it"
    else:
        tokens = [r["tokens_per_second"] for r in rates if r.get("tokens_per_second") is not None]
        result.update(samples_per_second=sum(r["samples_per_second"] for r in rates),
                      tokens_per_second=sum(tokens) if len(tokens) == len(rates) else None,
                      source=f"{BATCHES}, all hosts")
        return result
    result.update(samples_per_second=None, tokens_per_second=None, source=f"{BATCHES}: not summed, {unsummed}")
    return result

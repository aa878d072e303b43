"""What a job cost and when a compiled job paid for its compilation: the analysis AWS's notebooks did by hand.

- Cost: each job's wall time times the price of one instance-hour times its hosts (SageMaker bills every instance of
  a job for its run). The wall time is `train`'s, from the job's start to its verdict: SageMaker's
  BillableTimeInSeconds also counts downloading the data and the image, the same for both jobs of a comparison.
- Break-even: a compiled job waits longer for its first optimizer step (it compiles) and then, if the compiler
  pays, takes less time per step. Against an eager job, the extra wait divided by the time saved per step is the
  number of optimizer steps after which the compiled job is ahead.
"""

from __future__ import annotations

import math

from .summary import JobSummary

EAGER = "eager"   # the job summary's backend with the compiler off


def cost(summary: JobSummary, price_per_hour: float) -> float | None:
    """USD for the job: wall time x price x hosts (a summary without hosts counts one)."""
    wall = summary.get("wall_seconds")
    if wall is None:
        return None
    hosts = max(1, len(set(summary.get("hosts") or [])))
    return wall / 3600 * price_per_hour * hosts


def saving(first: float | None, this: float | None) -> str:
    """What this job saves against the first, in USD and as a share of the first's cost."""
    if first is None or this is None:
        return "-"
    share = f" ({(first - this) / first:+.0%})" if first else ""
    return f"{first - this:,.4f}{share}"


def break_even(first: JobSummary, this: JobSummary) -> str:
    """After how many optimizer steps the compiled job of the pair is ahead of the eager one; '-' unless exactly one
    of them is eager and both measured their first step and their steps."""
    backends = (first.get("backend"), this.get("backend"))
    if backends.count(EAGER) != 1 or None in backends:
        return "-"
    eager, compiled = (first, this) if backends[0] == EAGER else (this, first)
    eager_wait, compiled_wait = eager.get("first_step_seconds"), compiled.get("first_step_seconds")
    eager_step = (eager.get("step_seconds") or {}).get("median")
    compiled_step = (compiled.get("step_seconds") or {}).get("median")
    if eager_wait is None or compiled_wait is None or eager_step is None or compiled_step is None:
        return "-"
    extra_wait, saved_per_step = compiled_wait - eager_wait, eager_step - compiled_step
    ran = compiled.get("optimizer_steps")
    ran_words = f" (it ran {ran:,})" if isinstance(ran, int) else ""
    if extra_wait <= 0:
        return "from the start: no extra wait for its first step"
    if saved_per_step <= 0:
        return f"never: its steps are not faster ({extra_wait:,.1f} s extra wait)"
    steps_needed = math.ceil(extra_wait / saved_per_step - 1e-9)   # 30 / (0.5 - 0.4) is 300, not 300.0000001
    return f"{steps_needed:,} optimizer steps{ran_words}"

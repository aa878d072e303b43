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
MAX_STEPS = 1e12  # a break-even past this many optimizer steps is never reached; said as a bound
MAX_SHARE = 100   # a saving's share of the first job's cost is shown up to 100x (10,000%), then as a bound


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
    share = ""
    if first > 0:
        ratio = (first - this) / first
        # A first job that cost next to nothing makes any other's share a 300-digit percentage: said as a bound.
        share = f" ({ratio:+.0%})" if abs(ratio) <= MAX_SHARE else f" (more than {MAX_SHARE:.0f}x the first's cost)"
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
    # Each step widens the gap by the saving, so the wait alone decides nothing: a compiled job that started sooner
    # with slower steps falls behind, and one that waited longer with faster steps catches up.
    if saved_per_step <= 0 and extra_wait > 0:
        return f"never: its steps are not faster ({extra_wait:,.1f} s extra wait)"
    if saved_per_step < 0:
        sooner = f", though its first step came {-extra_wait:,.1f} s sooner" if extra_wait < 0 else ""
        return f"never: its steps are slower ({_ms(compiled_step)} vs {_ms(eager_step)}){sooner}"
    if extra_wait <= 0:
        return "from the start: no extra wait for its first step"
    steps_needed = extra_wait / saved_per_step   # a float, inf at worst: math.ceil is only given a bounded one
    if steps_needed > MAX_STEPS:
        return f"after more than {MAX_STEPS:,.0f} optimizer steps{ran_words}: never in practice"
    return f"{math.ceil(steps_needed - 1e-9):,} optimizer steps{ran_words}"   # 30 / (0.5 - 0.4) is 300, not 300.0000001


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"

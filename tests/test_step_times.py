"""The step times a job summary reports, value by value (launcher measurements.step_statistics and
compile_report.late_compilation_finding; toolkit job_summary.self_launched): warm-up left out, the later steps that
compiled left out and said, unless compiling is the job's steady state; and a script that trained in processes of its
own leaves its steps unknown. The real jobs are in test_job_summary.py and test_aws_examples.py."""

import pytest

from opentc_launcher.compile_report import late_compilation_finding
from opentc_launcher.measurements import step_statistics
from opentc_launcher.steps import StepCounter
from opentc_toolkit.job_summary import SELF_LAUNCHED_CPU_SECONDS, self_launched


def counter(durations):
    """Optimizer steps that ended after these durations (seconds), from a start at 100.0."""
    steps = StepCounter()
    moment = 100.0
    for duration in durations:
        moment += duration
        steps.step_ends.append(moment)
        steps.steps += 1
    return steps


def test_warm_up_steps_are_left_out():
    stats = step_statistics(counter([5.0, 3.0, 0.1, 0.1, 0.1, 0.1]), warmup=2)
    assert stats["warmup_steps"] == 2 and stats["measured_steps"] == 4 and stats["median"] == pytest.approx(0.1)
    assert stats["compiling_left_out"] == 0 and stats["slowest_left_out"] is None


def test_a_later_step_that_compiled_is_left_out_and_said():
    """TRL's SFT job on Inductor: two graphs compiled after warm-up made the median 1,382 ms against 65 ms warm."""
    durations = [5.0, 3.0] + [0.065] * 10 + [1.4] + [0.065] * 10
    steps = counter(durations)
    compiled_at = [steps.step_ends[12] - 0.5]   # inside the 13th step: (ends[11], ends[12]]
    stats = step_statistics(steps, warmup=2, compiled_at=compiled_at)
    assert stats["compiling_left_out"] == 1 and stats["slowest_left_out"] == pytest.approx(1.4)
    assert stats["measured_steps"] == 20 and stats["median"] == pytest.approx(0.065) and stats["p90"] < 0.1
    finding = late_compilation_finding(stats)
    assert finding.kind == "late_compilation" and finding.problem.startswith(
        "1 step(s) after warm-up (step 2) compiled new graphs, the slowest taking 1.4 s against a median of 65 ms")
    assert "warm-up more steps" in finding.fix and "a last smaller batch" in finding.fix


def test_a_compilation_during_warm_up_or_a_step_that_stayed_fast_is_not_a_finding():
    steps = counter([5.0, 0.1, 0.1, 0.11, 0.1, 0.1, 0.1])
    in_warmup = step_statistics(steps, warmup=2, compiled_at=[steps.step_ends[0] - 1.0])
    assert in_warmup["compiling_left_out"] == 0
    small = step_statistics(steps, warmup=2, compiled_at=[steps.step_ends[3] - 0.01])   # a tiny graph, 0.11 s
    assert small["compiling_left_out"] == 1 and late_compilation_finding(small) is None


def test_when_most_steps_compile_that_is_the_steady_state_and_stays_in():
    steps = counter([5.0] + [1.0, 0.1] * 6)
    compiled_at = [steps.step_ends[i] - 0.5 for i in range(1, 13, 2)]   # every other step: half of them
    stats = step_statistics(steps, warmup=1, compiled_at=compiled_at)
    assert stats["compiling_left_out"] == 0 and stats["measured_steps"] == 12


@pytest.mark.parametrize(("record", "unseen"), [
    ({"optimizer_steps": 0, "children_cpu_seconds": 40.0}, True),    # a launcher's workers trained
    ({"optimizer_steps": 12, "children_cpu_seconds": 40.0}, False),  # the worker trained: a data tool beside it
    ({"optimizer_steps": 0, "children_cpu_seconds": SELF_LAUNCHED_CPU_SECONDS - 0.5}, False),
    ({"optimizer_steps": 0}, False),                                 # a summary of a worker from before
    (None, False),
])
def test_a_worker_that_counted_no_step_while_its_children_worked_leaves_the_steps_unknown(record, unseen):
    why = self_launched(record)
    assert (why is not None) is unseen
    if unseen:
        assert why.startswith("the script started processes of its own that did the work (40 CPU-seconds")

"""The step times a job summary reports, value by value (launcher measurements.step_statistics and
compile_report.late_compilation_finding; toolkit job_summary.self_launched): warm-up left out, the later steps that
compiled left out and said, unless compiling is the job's steady state; and a script that trained in processes of its
own leaves its steps unknown. The real jobs are in test_job_summary.py and test_aws_examples.py."""

from unittest import mock

import pytest

from opentc_launcher.compile_report import late_compilation_finding
from opentc_launcher.measurements import step_statistics
from opentc_launcher.steps import StepCounter
from opentc_toolkit import loss_lines
from opentc_toolkit.job_summary import SELF_LAUNCHED_CPU_SECONDS, self_launched
from opentc_toolkit.loss_lines import LossLines


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


LAST_STEP = 1000.0   # time.time() of the worker's last step
STEPPED = {"optimizer_steps": 1, "children_cpu_seconds": 40.0, "cpu_seconds": 6.0, "last_step_at": LAST_STEP}


@pytest.mark.parametrize(("record", "later_lines", "unseen"), [
    ({"optimizer_steps": 0, "children_cpu_seconds": 40.0}, [], True),    # a launcher's workers trained
    ({"optimizer_steps": 12, "children_cpu_seconds": 40.0}, [], False),  # the worker trained: a data tool beside it
    ({"optimizer_steps": 0, "children_cpu_seconds": SELF_LAUNCHED_CPU_SECONDS - 0.5}, [], False),
    ({"optimizer_steps": 0}, [], False),                                 # a summary of a worker from before
    (None, [], False),
    # issue 51 (7): a step of its own, then its children trained: more CPU than the worker, and losses after it
    (STEPPED, [LAST_STEP + 0.2, LAST_STEP + 5, LAST_STEP + 9], True),
    (STEPPED, [LAST_STEP + 0.2, LAST_STEP + 5], False),                 # its last step's line, and one more
    ({**STEPPED, "cpu_seconds": 50.0}, [LAST_STEP + 5, LAST_STEP + 9], False),   # DataLoader workers beside it
    ({**STEPPED, "optimizer_steps": 300}, [LAST_STEP - 9, LAST_STEP - 5], False),  # it trained: lines before its end
    ({k: v for k, v in STEPPED.items() if k != "cpu_seconds"}, [LAST_STEP + 5, LAST_STEP + 9], False),  # older
])
def test_where_the_work_ran_decides_whether_the_workers_steps_are_the_jobs(record, later_lines, unseen):
    lines = LossLines()
    for moment in later_lines:
        with mock.patch.object(loss_lines.time, "time", return_value=moment):
            lines.feed("step 3 loss 1.0")
    why = self_launched(record, lines.arrived_after)
    assert (why is not None) is unseen
    if unseen:
        assert why.startswith("the script started processes of its own that did the work (40 CPU-seconds"), why
        assert ("1 optimizer step(s) of its own and used 6 CPU-seconds, and 2 loss lines came after its last step"
                in why) is bool(record["optimizer_steps"]), why

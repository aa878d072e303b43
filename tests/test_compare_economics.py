"""What a job cost and when its compilation paid back (opentc_compare.economics): the rules value by value, and the
installed `opentc-compare --price-per-hour` printing them, with the jobs' findings under the table."""

from __future__ import annotations

import json
import math

import pytest
from test_compare_inputs import compare, refused, summary_job

from opentc_compare.cli import MAX_PRICE
from opentc_compare.economics import break_even, cost, saving
from opentc_compare.summary import FORMAT, MAX_SECONDS


def job(backend, first_step, median, steps=100, wall=100.0, hosts=("algo-1",)):
    return {"backend": backend, "first_step_seconds": first_step, "step_seconds": {"median": median},
            "optimizer_steps": steps, "wall_seconds": wall, "hosts": list(hosts)}


@pytest.mark.parametrize(("summary", "expected"), [
    (job("eager", 1, 1, wall=3600), 2.0),
    (job("xla", 1, 1, wall=1800, hosts=("algo-1", "algo-2")), 2.0),   # every host is billed
    ({"wall_seconds": 360}, 0.2),                                      # no hosts listed: one
    ({"wall_seconds": None}, None),
])
def test_cost_is_wall_time_times_price_times_hosts(summary, expected):
    assert cost(summary, 2.0) == (pytest.approx(expected) if expected is not None else None)


def test_saving_is_against_the_first_with_its_share():
    assert saving(2.0, 1.5) == "0.5000 (+25%)"
    assert saving(2.0, 3.0) == "-1.0000 (-50%)"
    assert saving(None, 1.0) == "-" and saving(1.0, None) == "-"
    assert saving(0.0, 1.0) == "-1.0000"                       # a first job that cost nothing: no share of it


def test_a_share_of_a_first_cost_next_to_nothing_is_a_bound_never_inf():
    """B: the smallest wall time the check accepts against the largest: -inf% before, or 300 digits."""
    first, this = cost(job("eager", 0, 0, wall=1e-300), 1.0), cost(job("xla", 0, 0, wall=1e9), 1.0)
    assert saving(first, this) == f"{first - this:,.4f} (more than 100x the first's cost)"
    assert saving(1.0, 101.0) == "-100.0000 (-10000%)"
    assert saving(1.0, 101.5).endswith("(more than 100x the first's cost)")


def test_the_largest_cost_the_checks_accept_is_finite():
    """B: a wall time of 1.7e308 cost inf; the summary check now bounds wall times and --price-per-hour prices."""
    largest = cost(job("xla", 0, 0, wall=MAX_SECONDS, hosts=[f"algo-{i}" for i in range(10_000)]), MAX_PRICE)
    assert largest is not None and math.isfinite(largest)


@pytest.mark.parametrize(("first", "this", "expected"), [
    # 30 s more to the first step, 0.1 s saved per step: ahead after 300 steps
    (job("eager", 10.0, 0.5), job("inductor", 40.0, 0.4, steps=1000), "300 optimizer steps (it ran 1,000)"),
    # the compiled job first: the same pair read the other way round
    (job("xla", 40.0, 0.4, steps=50), job("eager", 10.0, 0.5), "300 optimizer steps (it ran 50)"),
    (job("eager", 10.0, 0.5), job("xla", 40.0, 0.6), "never: its steps are not faster (30.0 s extra wait)"),
    (job("eager", 10.0, 0.5), job("xla", 9.0, 0.4), "from the start: no extra wait for its first step"),
    (job("eager", 10.0, 0.5), job("xla", 10.0, 0.5), "from the start: no extra wait for its first step"),
    # A: a first step 1 s sooner does not pay for steps 3x slower: the compiled job falls behind after 50 steps
    (job("eager", 10.0, 0.01), job("xla", 9.0, 0.03),
     "never: its steps are slower (30.0 ms vs 10.0 ms), though its first step came 1.0 s sooner"),
    (job("eager", 10.0, 0.5), job("xla", 10.0, 0.6), "never: its steps are slower (600.0 ms vs 500.0 ms)"),
    (job("eager", 10.0, 0.5), job("xla", 40.0, 0.5), "never: its steps are not faster (30.0 s extra wait)"),
    # B: the largest wait the check accepts over the smallest saving a float holds: a bound, not an OverflowError
    (job("eager", 0.0, 2e-300), job("xla", 1e9, 1e-300, steps=7),
     "after more than 1,000,000,000,000 optimizer steps (it ran 7): never in practice"),
    (job("eager", 10.0, 0.5), job("eager", 40.0, 0.4), "-"),          # two eager jobs: nothing compiled
    (job("xla", 10.0, 0.5), job("inductor", 40.0, 0.4), "-"),         # two compilers: no eager reference
    (job("eager", None, 0.5), job("xla", 40.0, 0.4), "-"),            # not measured
    (job("eager", 10.0, 0.5), job("xla", 40.0, None), "-"),
])
def test_break_even_is_the_extra_wait_over_the_time_saved_per_step(first, this, expected):
    assert break_even(first, this) == expected


def test_compare_prints_cost_saving_break_even_and_findings(tmp_path):
    eager = summary_job(tmp_path / "native", job_name="native", outcome={"succeeded": True},
                        **job("eager", 10.0, 0.5, wall=360.0))
    compiled = summary_job(tmp_path / "compiled", job_name="compiled", outcome={"succeeded": True},
                           findings=["compile report of rank0: 2 graph break(s). To fix: x."],
                           **job("inductor", 40.0, 0.4, steps=1000, wall=180.0))
    result = compare(eager, compiled, "--price-per-hour", "2")
    assert result.returncode == 0, result.stderr
    rows = {line.split(" | ")[0].lstrip("| "): line for line in result.stdout.splitlines()}
    assert rows["cost (USD at 2/h per host)"] == "| cost (USD at 2/h per host) | 0.2000 | 0.1000 |"
    assert rows["saving vs first (USD)"] == "| saving vs first (USD) | - | 0.1000 (+50%) |"
    assert rows["compile paid back vs first after"] == \
        "| compile paid back vs first after | - | 300 optimizer steps (it ran 1,000) |"
    assert result.stdout.endswith(
        "Findings:\n- inductor (compiled): compile report of rank0: 2 graph break(s). To fix: x.\n")
    without = compare(eager, compiled)
    assert "cost (USD" not in without.stdout and "compile paid back" in without.stdout


@pytest.mark.parametrize("price", ["0", "-1", "nan", "inf", "cheap", "1e308"])
def test_a_price_that_is_not_a_number_above_zero_is_refused(tmp_path, price):
    job_folder = summary_job(tmp_path / "j", **job("eager", 1, 1))
    refused(compare(job_folder, "--price-per-hour", price), "--price-per-hour", "a number above 0")


def test_a_summary_without_findings_lists_none(tmp_path):
    folder = summary_job(tmp_path / "j", **job("eager", 1, 1))
    result = compare(folder)
    assert result.returncode == 0 and "Findings" not in result.stdout, result.stdout
    assert json.loads((folder / "output/data/job-summary.json").read_text())["format"] == FORMAT

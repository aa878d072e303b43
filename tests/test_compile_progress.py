"""A compile that looks alive (opentc_launcher.compile_progress): while a worker compiles for longer than the interval,
a line every interval says which rank, what it compiles and for how long; the compile report's timeline says where
the time went. The rule in this process; the lines from real workers whose compile is slow on purpose
(tests/scripts/compile/slow_compile.py: Inductor's compile callbacks around a backend that sleeps, and a long XLA
graph), with the interval at 1 s so that the test takes seconds, not minutes."""

import json
import logging
import subprocess
import time

import pytest

from conftest import BIN, SCRIPTS, clean_env
from opentc_launcher.compile_progress import CompileProgress

SLOW = SCRIPTS / "compile" / "slow_compile.py"


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "still compiling" in r.getMessage()]


def test_a_long_compile_is_said_every_interval_and_a_short_one_never(caplog):
    caplog.set_level(logging.INFO, logger="opentc_launcher")
    progress = CompileProgress("rank3", every=0.2)
    progress.started("GPT2Block.forward (modeling_gpt2.py:262)")
    time.sleep(0.7)
    progress.ended()
    said = lines(caplog)
    assert len(said) >= 2 and said[0].startswith("rank3: still compiling GPT2Block.forward (modeling_gpt2.py:262): "), \
        said
    assert said[0].endswith("s so far (no graph done before it)"), said
    progress.started("a short one")
    progress.ended()                       # under the interval: nothing said
    progress.started("a sync that compiled nothing")
    progress.ended(counted=False)          # an XLA sync whose graph was cached: not a compilation
    time.sleep(0.3)
    assert lines(caplog) == said
    assert [e["what"] for e in progress.timeline] == ["GPT2Block.forward (modeling_gpt2.py:262)", "a short one"]
    assert progress.timeline[0]["seconds"] >= 0.7 and progress.done == 2


def test_with_no_interval_nothing_is_said_and_the_timeline_is_kept(caplog):
    caplog.set_level(logging.INFO, logger="opentc_launcher")
    progress = CompileProgress("rank0", every=0.0)
    progress.started("f")
    time.sleep(0.2)
    progress.ended()
    assert lines(caplog) == [] and progress._thread is None and len(progress.timeline) == 1


def test_the_default_is_left_off_by_its_name_or_by_no_interval():
    from opentc_launcher.compile_progress import every
    from opentc_launcher.options import WorkerOptions

    for options, seconds in ((WorkerOptions(), 30.0), (WorkerOptions(defaults_off="progress"), 0.0),
                             (WorkerOptions(defaults_off="all"), 0.0), (WorkerOptions(compile_progress_seconds=0), 0.0),
                             (WorkerOptions(defaults_off="regional", compile_progress_seconds=5), 5.0)):
        assert every(options.compile_progress_seconds, options.is_off("progress")) == seconds, options


def run_worker(tmp_path, backend: str, *options: str, **script: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "report"
    argv = [str(BIN / "opentc-worker"), "--backend", backend, "--device", "cpu", "--compile-report-dir", str(report),
            *options, str(SLOW), "--backend", backend, *(x for k, v in script.items() for x in (f"--{k}", v))]
    proc = subprocess.run(argv, env=clean_env(), cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return proc, json.loads((report / "compile-report-rank0.json").read_text())


@pytest.mark.slow
@pytest.mark.inductor
def test_an_inductor_worker_that_compiles_for_seconds_says_so_and_its_report_says_where_the_time_went(tmp_path):
    proc, report = run_worker(tmp_path, "inductor", "--compile-progress-seconds", "1", seconds="3")
    said = [line for line in proc.stdout.splitlines() if "still compiling" in line]
    assert len(said) >= 1 and f"rank0: still compiling slow_step ({SLOW}:" in said[0], proc.stdout[-3000:]
    [entry] = report["compile_timeline"]
    assert entry["what"].startswith("slow_step (") and entry["seconds"] >= 3, report["compile_timeline"]
    phases = report["compile_phases"]
    assert phases["all"] >= 3 and phases["the backend (AOTAutograd and Inductor)"] >= 3, phases   # the sleep's
    assert report["compile_time_defaults"]["progress"] == "on: a line every 1 s while a compile lasts longer"


@pytest.mark.slow
@pytest.mark.xla
def test_an_xla_worker_whose_sync_compiles_for_seconds_says_so(tmp_path):
    # graphs that grow until one sync lasts 3 s, three intervals, whatever the machine's speed
    proc, report = run_worker(tmp_path, "xla", "--compile-progress-seconds", "1", ops="60", seconds="3")
    said = [line for line in proc.stdout.splitlines() if "still compiling" in line]
    assert said and said[0].startswith("[opentc-launcher] INFO rank0: still compiling the first sync's graph (XLA "
                                       "compiling it, or running it): "), proc.stdout[-3000:]
    timeline = report["compile_timeline"]
    assert timeline and {e["what"] for e in timeline} == {"the first sync's graph (XLA compiling it, or running it)"}, \
        timeline
    assert timeline[-1]["seconds"] >= 3, timeline   # the sync that lasted: one graph compiled, each sync its own

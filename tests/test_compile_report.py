"""The compile report, the recompilation guard and the persistent compilation cache, on real torch-xla (CPU).

Each behaviour has a script in tests/scripts/compile/ that follows or breaks one of Training Compiler's
rules; the worker bootstrap runs it unchanged.
"""

import fcntl
import json
import os
import shutil
import subprocess

import pytest

from conftest import BIN, SCRIPTS, clean_env, run_train

pytestmark = [pytest.mark.slow, pytest.mark.xla]

COMPILE = SCRIPTS / "compile"


def run_worker(script, tmp_path, *script_args, cache=None, extra=(), report_dir=None):
    report_dir = report_dir or tmp_path / "report"
    argv = [str(BIN / "opentc-worker"), "--device", "cpu", "--compile-report-dir", str(report_dir)]
    if cache:
        argv += ["--compile-cache-dir", str(cache)]
    argv += [*extra, str(COMPILE / script), *script_args]
    proc = subprocess.run(argv, env=clean_env(), cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    path = report_dir / "compile-report-rank0.json"
    report = json.loads(path.read_text()) if path.exists() else None
    return proc, report


def problems(report):
    return " | ".join(f["problem"] for f in report["findings"])


def test_static_shapes_get_a_short_clean_summary(tmp_path):
    proc, report = run_worker("static_shapes.py", tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["optimizer_steps"] == 12 and report["syncs"] == 12 and 1 <= report["graphs_compiled"] <= 3
    assert report["steps_with_host_reads"] == 0 and report["executions_per_step"] == {"1": 11}
    assert report["graphs_after_warmup"] == 0 and report["findings"] == []
    assert len(report["compile_seconds_per_graph"]) == report["graphs_compiled"]
    assert report["compile_seconds_total"] == pytest.approx(sum(report["compile_seconds_per_graph"]), abs=0.01)
    assert report["executions"] >= 12 and report["in_memory_cache_hits"] >= 10
    summary = [line for line in proc.stdout.splitlines() if "compile report:" in line]
    assert len(summary) == 1 and summary[0].endswith("clean.")
    assert "WARNING" not in proc.stdout


def test_each_graph_is_put_at_the_step_that_dispatched_it_while_the_device_lags_behind(tmp_path):
    # Iteration i dispatches 1 graph when i is even, 3 when it is odd, each heavy enough to still be queued when the
    # next optimizer step ends; the 11 steps measured (the first carries the set-up) saw 6 ones and 5 threes.
    proc, report = run_worker("uneven_graphs.py", tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["optimizer_steps"] == 12
    assert report["executions_per_step"] == {"1": 6, "3": 5}
    assert report["executions"] == 12 + 2 * 6            # the total, counted as they ran, agrees once all have


def test_shapes_changing_every_step_are_named_while_running_and_in_the_report(tmp_path):
    proc, report = run_worker("changing_shapes.py", tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["graphs_compiled"] >= 12
    assert report["graphs_after_warmup"] >= 5 and report["steps_with_late_graphs"] >= 5
    assert "input shapes are changing between steps" in problems(report)
    assert "padding='max_length'" in report["findings"][0]["fix"]
    out = proc.stdout
    live = out.index("new graphs keep being compiled after warm-up")        # warned while the job ran ...
    assert live < out.index("compile report:")                   # ... before the final report


def test_item_every_step_is_an_explicit_evaluation(tmp_path):
    proc, report = run_worker("item_every_step.py", tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["explicit_evaluations"] == 12
    assert report["device_to_host_transfers"] >= 12
    assert "aten::_local_scalar_dense" not in report["cpu_fallback_ops"]   # counted as evaluations instead
    assert report["steps_with_host_reads"] == 11     # every step after the first
    assert "read back to the host (explicit evaluation) in 11 of 11 optimizer steps (12 in all)" in problems(report)
    assert "log less often" in report["findings"][0]["fix"]


@pytest.mark.parametrize("optimizer", ["torch", "syncfree"])
def test_fp16_loss_scaling_that_reads_the_host_each_step_is_named_with_its_fix(tmp_path, optimizer):
    """A plain loop's GradScaler with torch's AdamW checks for overflow on the host every step; with torch-xla's
    scaler and a sync-free optimizer it does not, and the report is clean."""
    proc, report = run_worker("fp16_scaler.py", tmp_path, "--optimizer", optimizer)
    assert proc.returncode == 0, proc.stdout[-3000:]
    if optimizer == "torch":
        assert report["loss_scaling_host_checks"] == {"AdamW": 12}, report
        assert report["steps_with_host_reads"] == 11, report
        assert "fp16 loss scaling reads them: GradScaler.step checked for overflow on the host before stepping " \
               "AdamW (12 steps)" in problems(report)
        assert "torch_xla.amp.syncfree" in report["findings"][0]["fix"] and "bf16" in report["findings"][0]["fix"]
    else:
        assert report["loss_scaling_host_checks"] == {} and report["steps_with_host_reads"] == 0, report
        assert report["findings"] == [], report


def test_op_without_a_lowering_is_named(tmp_path):
    proc, report = run_worker("fallback_op.py", tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["cpu_fallback_ops"] == {"aten::histc": 12}
    assert "aten::histc x12" in problems(report)
    assert "aten::histc x12" in proc.stdout


def test_report_is_written_when_the_script_fails(tmp_path):
    proc, report = run_worker("static_shapes.py", tmp_path, "--fail_at", "3")
    assert proc.returncode == 1
    assert report["exit_code"] == 1 and report["optimizer_steps"] == 4


def test_compilation_limit_stops_the_job_with_a_clear_failure(make_job):
    job = make_job(script="compile/changing_shapes.py", sagemaker_training_compiler_max_compilations=4, steps=40)
    result = run_train(job)
    assert result.returncode == 4
    assert "compilation limit reached: 5 graphs compiled, more than the 4 allowed" in job.failure
    assert "sagemaker_training_compiler_max_compilations" in job.failure
    report = job.compile_report()
    assert report["exit_code"] == 4 and report["graphs_compiled"] == 5


def cache_job(make_job):
    return make_job(script="compile/static_shapes.py")


def test_second_identical_job_compiles_nothing(make_job):
    first = cache_job(make_job)
    assert run_train(first).returncode == 0
    cold = first.compile_report()
    assert cold["graphs_compiled"] >= 1 and cold["persistent_cache"]["hits"] == 0
    cache = first.checkpoints / "compile-cache"
    assert cold["persistent_cache"]["dir"].startswith(str(cache))
    # A new job whose checkpoint folder carries the cache, as SageMaker's checkpoint sync does.
    second = cache_job(make_job)
    shutil.copytree(cache, second.checkpoints / "compile-cache")
    result = run_train(second)
    assert result.returncode == 0, result.output[-3000:]
    warm = second.compile_report()
    assert warm["graphs_compiled"] == 0
    assert warm["persistent_cache"]["hits"] == cold["graphs_compiled"]
    assert f"{cold['graphs_compiled']} loaded from the persistent cache" in result.output


def test_cache_can_be_turned_off(make_job):
    job = cache_job(make_job)
    job.set_hyperparameters(sagemaker_training_compiler_cache=False)
    assert run_train(job).returncode == 0
    assert job.compile_report()["persistent_cache"]["dir"] == ""
    assert not job.checkpoints.exists()


def test_corrupt_and_foreign_cache_entries_do_not_crash(tmp_path):
    cache = tmp_path / "cache"
    proc, cold = run_worker("static_shapes.py", tmp_path, cache=cache)
    assert proc.returncode == 0
    folder = cold["persistent_cache"]["dir"]
    entries = [e for e in os.listdir(folder) if not e.startswith(".")]
    assert entries
    for entry in entries:
        with open(os.path.join(folder, entry), "wb") as f:
            f.write(b"\x00not a compiled executable")
    with open(os.path.join(folder, "12345678901234567890"), "wb") as f:   # an entry no graph asks for
        f.write(b"foreign")
    proc, report = run_worker("static_shapes.py", tmp_path, cache=cache, report_dir=tmp_path / "again")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["persistent_cache"]["load_failures"] == len(entries)
    assert report["graphs_compiled"] == len(entries)              # compiled again ...
    assert "could not be loaded" in problems(report)
    proc, report = run_worker("static_shapes.py", tmp_path, cache=cache, report_dir=tmp_path / "third")
    assert report["graphs_compiled"] == 0                          # ... and rewritten


def test_a_cache_folder_in_use_by_another_job_is_read_only(tmp_path):
    cache = tmp_path / "cache"
    run_worker("static_shapes.py", tmp_path, cache=cache)
    folder = next((cache).glob("torch_xla-*-CPU/rank0"))
    with open(folder / ".opentc-writer.lock", "w") as lock:   # another job holds the writer lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc, report = run_worker("static_shapes.py", tmp_path, cache=cache, report_dir=tmp_path / "r2")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["persistent_cache"]["mode"].startswith("read-only")
    assert report["graphs_compiled"] == 0            # it still reads what the other job wrote


def test_two_jobs_sharing_a_cache_both_finish(tmp_path):
    cache = tmp_path / "cache"
    procs = []
    for name in ("a", "b"):
        argv = [str(BIN / "opentc-worker"), "--device", "cpu", "--compile-cache-dir", str(cache),
                "--compile-report-dir", str(tmp_path / name), str(COMPILE / "changing_shapes.py"), "--steps", "8"]
        procs.append(subprocess.Popen(argv, env=clean_env(), cwd=str(tmp_path), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    modes = [json.loads((tmp_path / n / "compile-report-rank0.json").read_text())["persistent_cache"]["mode"]
             for n in ("a", "b")]
    assert "read-write" in modes, modes   # at most one writer at a time; the other, if it overlapped, read

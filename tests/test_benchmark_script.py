"""The benchmark stays runnable: one real eager measurement through its worker, and its tables from the
committed results (the full benchmark is too long for the suite: benchmarks/RESULTS.md)."""

import importlib
import json
import subprocess
import sys
import warnings
from types import SimpleNamespace

import pytest

from conftest import REPO, clean_env

sys.path.insert(0, str(REPO / "benchmarks"))

pytestmark = [pytest.mark.slow]


def test_worker_measures_one_configuration():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_worker.py"), "--backend", "eager",
                           "--config", "tiny", "--seq", "16", "--batch", "2", "--warmup", "1", "--steps", "2"],
                          env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH_RESULT "))
    result = json.loads(line.split(" ", 1)[1])
    assert result["device"] == "cpu" and result["median_step_s"] > 0 and result["tokens_per_s"] > 0


def test_the_trainers_step_profile_says_where_a_cpu_steps_host_time_went(tmp_path):
    """benchmarks/trainer_step_profile.py (dev/gpu-kit's figure 9) through opentc-run, as a job's worker runs, on
    the CPU: the Trainer's steps timed, torch's profile of one window (no device here: no busy time, no CUDA call)
    and Python's of the next, whose largest self times include the backward pass the Trainer runs."""
    script = REPO / "benchmarks" / "trainer_step_profile.py"
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "opentc-run"), "--standalone", "--nproc-per-node", "1",
                           "--backend", "eager", "--device", "cpu", str(script), "--steps", "16", "--window", "3",
                           "--output-dir", str(tmp_path / "out")],
                          env=clean_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH_RESULT "))
    result = json.loads(line.split(" ", 1)[1])
    assert result["device"] == "cpu" and result["window_steps"] == 3
    assert result["median_step_s"] > 0 and result["window_step_s"] > 0 and result["profiled_step_s"] > 0
    assert result["device_busy_step_s"] is None and result["device_busy_share"] is None
    assert result["synchronizing_calls_a_step"] == {} and result["kernel_launches_a_step"] == 0
    assert len(result["host_top_torch"]) == len(result["host_top_python"]) == 12
    assert any("run_backward" in row["function"] for row in result["host_top_python"]), result["host_top_python"]
    assert all(row["self_ms_a_step"] >= 0 for row in result["host_top_torch"])


def test_on_a_gpu_the_plain_loop_counts_cudas_synchronizing_calls_but_not_its_own(monkeypatch):
    """bench_worker counts, in each measured step on a GPU, CUDA's synchronizing calls as torch reports them under
    torch.cuda.set_sync_debug_mode("warn") (a warning each), with the debug mode off around the loop's own
    synchronize and after the measured steps. No GPU here: a stand-in for torch.cuda's debug mode, and the warnings
    worded as torch words them."""
    import bench_worker

    from opentc_launcher import host_reads

    monkeypatch.setattr(host_reads.HostReads, "install", lambda self: self)   # no tensor method wrapped here
    modes = []
    reads = bench_worker.Reads(SimpleNamespace(cuda=SimpleNamespace(set_sync_debug_mode=modes.append)),
                               SimpleNamespace(type="cuda"))
    filters = list(warnings.filters)
    reads.step_ended()   # a warm-up step: not measured
    reads.start()
    warnings.warn(bench_worker.SYNC_WARNING, stacklevel=1)
    warnings.warn("another warning", stacklevel=1)
    reads.step_ended()
    with reads.paused():
        assert modes == ["warn", 0]
    reads.step_ended()
    warnings.warn(bench_worker.SYNC_WARNING, stacklevel=1)
    warnings.warn(bench_worker.SYNC_WARNING, stacklevel=1)
    reads.step_ended()
    assert reads.stop() == {"host_reads_per_step": 0, "host_reads_at": [], "cuda_syncs_per_step": 1}   # 1, 0, 2
    assert modes == ["warn", 0, "warn", 0] and warnings.filters == filters


@pytest.mark.parametrize(("module", "name"), [
    ("compiler_benchmark", "latest.json"), ("trainer_benchmark", "trainer.json"), ("job_benchmark", "jobs-cache.json"),
    ("torch_versions_benchmark", "torch-versions.json"), ("startup_benchmark", "startup.json"),
    ("startup_benchmark", "startup-plain-regional.json"), ("regional_steps_benchmark", "regional_steps.json"),
    ("regional_kinds_benchmark", "regional_kinds.json"), ("trainer_loop_benchmark", "trainer-loop.json"),
    ("host_reads_benchmark", "host-reads.json"), ("startup_benchmark", "startup-short.json"),
])
def test_committed_results_render_as_the_results_file_shows(module, name):
    """Each benchmark's committed results, rendered by its own code, are the table it saved and RESULTS.md shows."""
    results = json.loads((REPO / "benchmarks" / "results" / name).read_text())
    table = importlib.import_module(module).render(results)
    assert table == results["table"]
    assert table in (REPO / "benchmarks" / "RESULTS.md").read_text()


def test_the_worker_builds_t5_and_llama_with_their_kinds_of_block():
    """bench_worker's other families, by the rule regional compilation decides by: T5's stacks two kinds each (the
    first block carries the position bias table), Llama's blocks one."""
    from bench_worker import build_model

    from opentc_launcher.inductor.repeated_blocks import repeated_kinds

    t5, llama = build_model("t5-6", 2048, 64), build_model("llama-2", 2048, 64)
    assert [len(t5.encoder.block), len(t5.decoder.block), len(llama.model.layers)] == [6, 6, 2]
    assert repeated_kinds(t5.encoder.block) == repeated_kinds(t5.decoder.block) == 2
    assert repeated_kinds(llama.model.layers) == 1
    assert t5.config.use_cache is False and llama.config.use_cache is False


def test_committed_sharding_results_render_as_the_results_file_shows():
    import sharding_benchmark

    results = json.loads((REPO / "benchmarks" / "results" / "sharding.json").read_text())
    table = sharding_benchmark.render(results)
    assert table == results["table"]
    assert table in (REPO / "benchmarks" / "RESULTS.md").read_text()


def test_sharding_worker_fsdp2_holds_less_model_state_than_ddp():
    """Two real workers over gloo, a tiny model, two steps: FSDP2 each worker holds half of DDP's model state, and
    both train to the same loss."""
    import sharding_benchmark

    tiny = {"width": 32, "depth": 2, "batch": 8, "warmup": 1, "steps": 1, "timeout": 120}
    ddp = sharding_benchmark.run_config(sys.executable, "ddp", False, **tiny)
    fsdp = sharding_benchmark.run_config(sys.executable, "fsdp2", False, **tiny)
    assert [r["sharded"] for r in fsdp["ranks"]] == [True, True] and not ddp["ranks"][0]["sharded"]
    full = ddp["ranks"][0]["model_state_bytes"]
    assert full == pytest.approx(4 * 4 * ddp["parameters"], rel=1e-3)   # float32 weights, grads, 2 moments
    assert all(0.4 * full < r["model_state_bytes"] < 0.6 * full for r in fsdp["ranks"])
    assert fsdp["final_loss"] == pytest.approx(ddp["final_loss"], rel=1e-5)

"""The Inductor backend (sagemaker_training_compiler_backend="inductor") on CPU, through the real `train`: plain
PyTorch workers that compile with torch.compile, with the persistent cache, the compile report and the
compilation limit XLA jobs have. Real Inductor on CPU (it compiles C++ with g++); no GPU is mocked.

Inductor compiles slowly on two cores, so the models are tiny and most jobs share one cache folder; the cache
test has a folder of its own, to start cold.

Where this runs: on the test venv's torch (2.7, the xla image's), and inside the inductor image on its torch (2.14)
by tests/container/test_inductor_suite.py. dev/test, which runs both parts, runs this module once, in the image
(OPENTC_INDUCTOR_TESTS=image): the image made for Inductor, on the torch its users get. torch 2.7's Inductor stays
covered by the other modules that compile with it (compile time, the cache, the summary, the distributions, TRL,
the xla image's Inductor job); a run without the images runs this module here.
"""

import json
import os
import shutil

import pytest

from conftest import BIN, SCRIPTS, clean_env, run_train
from opentc_launcher import exit_codes

if os.environ.get("OPENTC_INDUCTOR_TESTS") == "image":
    pytest.skip("OPENTC_INDUCTOR_TESTS=image: this run has these tests run inside the inductor image "
                "(tests/container/test_inductor_suite.py)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.inductor]

LOOP = SCRIPTS / "compile" / "inductor_loop.py"
# Inductor's kernels and eager PyTorch's differ only in float rounding (fused and reordered operations): losses
# agree to a few parts in ten thousand here (the sample: 1.8416 vs 1.8429 after 30 steps). 2 %, as for XLA.
RELATIVE_TOLERANCE = 0.02


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One Inductor cache for this module's jobs: each graph is compiled once, which keeps CI's time down."""
    return tmp_path_factory.mktemp("inductor-cache")


def inductor_job(make_job, script, cache=None, compiler=True, **hyperparameters):
    job = make_job(script=script, sagemaker_training_compiler_enabled=compiler,
                   sagemaker_training_compiler_backend="inductor", **hyperparameters)
    if cache is not None:
        job.set_hyperparameters(sagemaker_training_compiler_cache_dir=str(cache))
    return job


def assert_same_losses(eager, compiled):
    assert len(eager) == len(compiled) >= 2, (eager, compiled)
    for e, c in zip(eager, compiled, strict=True):
        assert c == pytest.approx(e, rel=RELATIVE_TOLERANCE), (eager, compiled)


def trainer_beside_eager(make_job, script, cache, **common):
    """A Trainer script trained with the compiler off, then on Inductor with the same hyperparameters: the compiled job
    and its result, once it has eager's losses and ran on the CPU with torch_xla untouched."""
    eager = inductor_job(make_job, script, compiler=False, **common)
    eager.set_hyperparameters(output_dir=str(eager.model))
    assert run_train(eager).returncode == 0
    job = inductor_job(make_job, script, cache=cache, **common)
    job.set_hyperparameters(output_dir=str(job.model))
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    metrics = job.read_json("output/data/trainer_metrics.json")
    assert metrics["torch_xla_imported"] is False and metrics["device"] == "cpu", metrics
    assert_same_losses(eager.read_json("output/data/trainer_metrics.json")["losses"], metrics["losses"])
    return job, result


def test_a_plain_script_compiles_what_it_passes_to_torch_compile(make_job, shared_cache):
    """The sample (a plain PyTorch loop that calls torch.compile) on Inductor: compiled, torch_xla never imported,
    the same loss curve as eager."""
    eager = make_job()
    eager.set_hyperparameters(sagemaker_training_compiler_enabled=False, max_steps=12)
    assert run_train(eager).returncode == 0
    job = make_job()
    job.set_hyperparameters(sagemaker_training_compiler_backend="inductor", max_steps=12,
                            sagemaker_training_compiler_cache_dir=str(shared_cache))
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    assert "Configuring SM Training Compiler... (sagemaker_training_compiler_backend=inductor)" in result.output
    assert "torch.compile (TorchInductor) ready on cpu" in result.output
    metrics = job.read_json("output/data/metrics.json")
    assert metrics["torch_xla_imported"] is False and metrics["device"] == "cpu"
    assert_same_losses([p["loss"] for p in eager.read_json("output/data/metrics.json")["losses"]],
                       [p["loss"] for p in metrics["losses"]])
    report = job.compile_report()
    assert report["backend"] == "inductor" and report["device"] == "cpu" and report["optimizer_steps"] == 12
    assert report["graphs_captured"] >= 1 and report["compilations"] >= 1 and report["compile_seconds_total"] > 0
    assert "rank0: compile report: " in result.output
    # transformers' warning_once in the loss breaks the graph unless skipped (test_compile_time: with it off).
    assert report["compile_time_defaults"]["logging"].startswith("on"), report["compile_time_defaults"]
    assert not any("Logger" in b["reason"] or "logging" in b["reason"] for b in report["graph_breaks"]), report


def test_a_script_that_never_compiles_is_told_so_with_the_fix(make_job):
    job = inductor_job(make_job, "compile/inductor_loop.py", compile="no")
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    report = job.compile_report()
    assert report["compilations"] == 0 and report["graphs_captured"] == 0
    # The loop reads its loss back every step (it keeps them for its metrics): a finding of its own, where it is.
    assert [f["problem"].split(":")[0] for f in report["findings"] if f["kind"] != "host_reads"] == [
        "nothing was compiled in this process"], report["findings"]
    assert all("compile/inductor_loop.py:" in f["problem"] for f in report["findings"] if f["kind"] == "host_reads")
    assert "model = torch.compile(model)" in report["findings"][0]["fix"]
    summary = [line for line in result.output.splitlines() if "rank0: compile report" in line]
    assert summary and "clean" not in summary[0], summary                  # never a silent "clean"
    assert "nothing was compiled in this process" in result.output and "model = torch.compile(model)" in result.output


def test_the_trainer_compiles_with_no_script_change(make_job, shared_cache):
    """tests/scripts/run_clm_tiny.py (run_clm's structure: HfArgumentParser, group_texts, Trainer, save_model) with
    no torch_compile argument: accelerate's plugin takes ACCELERATE_DYNAMO_BACKEND, and the model compiles,
    regionally by default: its three blocks share one graph, the model's own forward around them (lm_head and the
    loss) is a second, and the single layers beside the blocks stay eager."""
    common = {"max_steps": 8, "per_device_train_batch_size": 4, "learning_rate": 0.003, "logging_steps": 2,
              "save_strategy": "no", "report_to": "none", "optim": "adamw_torch", "dataloader_drop_last": True,
              "block_size": 64, "seed": 0, "config_overrides": "n_layer=3"}
    job, result = trainer_beside_eager(make_job, "run_clm_tiny.py", shared_cache, **common)
    assert (job.model / "model.safetensors").exists()
    report = job.compile_report()
    assert report["graphs_captured"] == 2 and report["compilations"] >= 2, report   # 3 blocks, and the head
    assert report["optimizer_steps"] == 8
    assert report["compile_time_defaults"]["regional"] == "on: ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=true"
    assert "regional compilation: 3 repeated blocks compiled in place, sharing one graph" in result.output
    assert report["compile_time_defaults"]["head"].startswith("on"), report["compile_time_defaults"]
    assert ("and GPT2LMHeadModel's own forward around transformer (lm_head, and its loss if it computes one) as one "
            "region") in result.output
    assert report["graph_breaks_total"] == 0, report["graph_breaks"]   # the boundary's own break is not the script's
    assert report["host_reads"]["per_step_median"] == 0, report["host_reads"]   # the sync-free step (issue 50)


def test_an_accelerate_loop_compiles_with_no_script_change(make_job, shared_cache):
    """An Accelerate loop whose GPT-2 has use_cache off, as training wants: compiled regionally, in place, so that
    unwrap_model(model).save_pretrained and accelerator.save_model save the model's own names."""
    common = {"max_steps": 8, "logging_steps": 2, "use_cache": "no"}
    eager = inductor_job(make_job, "accelerate_clm.py", compiler=False, **common)
    assert run_train(eager).returncode == 0
    job = inductor_job(make_job, "accelerate_clm.py", cache=shared_cache, **common)
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    metrics = job.read_json("output/data/accelerate_metrics.json")
    assert metrics["compiled"] is True and metrics["torch_xla_imported"] is False, metrics
    assert eager.read_json("output/data/accelerate_metrics.json")["compiled"] is False
    assert_same_losses(eager.read_json("output/data/accelerate_metrics.json")["losses"], metrics["losses"])
    assert metrics["reloaded_equal"] is True
    report = job.compile_report()
    assert report["graphs_captured"] == 2 and report["optimizer_steps"] == 8, report   # two blocks, and the head
    assert "regional compilation: 2 repeated blocks compiled in place" in result.output
    assert not any("for each layer" in f["problem"] for f in report["findings"]), report["findings"]


def test_a_plain_loops_torch_compile_compiles_a_repeated_block_once_with_eagers_gradients(make_job, shared_cache):
    """A script's own torch.compile(model), beside an eager twin in the same process (tests/scripts/compile/
    regional_loop.py): the tied GPT-2's three blocks compile in place as one graph, and the pyramid (blocks of one
    class in three widths) compiles whole. Both give eager's losses and gradients at every step, and the script gets
    what torch.compile returns (a wrapper whose _orig_mod is its model)."""
    job = inductor_job(make_job, "compile/regional_loop.py", cache=shared_cache)
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    metrics = job.read_json("output/data/regional_metrics.json")
    for name in ("gpt2", "pyramid"):
        run = metrics[name]
        assert run["returned"] == "OptimizedModule" and run["orig_mod_is_model"], run
        assert_same_losses(run["eager_losses"], run["losses"])
        # Float rounding of fused kernels is parts per million; a lost or doubled gradient is of order 1.
        assert run["largest_gradient_difference"] < 1e-3, run
    assert metrics["gpt2"]["tied"] is True
    assert ("regional compilation: torch.compile(GPT2LMHeadModel) compiled its 3 repeated blocks in place, sharing "
            "one graph per kind of block") in result.output
    assert "regional compilation: torch.compile(Pyramid) compiled whole: the model has no repeated blocks" \
        in result.output
    report = job.compile_report()
    assert "torch.compile(GPT2LMHeadModel) compiled its 3 repeated blocks" in \
        report["compile_time_defaults"]["regional"], report["compile_time_defaults"]
    # GPT-2's three blocks, its head (lm_head and the loss, around its transformer), and the whole pyramid
    assert report["graphs_captured"] == 3, report


T5_SHARING = "sharing one graph per kind of block (4 kinds)"


def t5_graphs_checked(job, result):
    """A 3-layer T5 (tests/scripts/compile/tiny_t5.py) compiled one graph per kind of block: 4 (each stack's first
    block, which carries the position bias table, and its other two), not 6 (one per block) and not the whole model,
    and two for its own forward around its stacks (between the encoder and the decoder, and lm_head with the loss);
    Dynamo recompiled T5Block.forward once for each new kind, and the report names no per-layer recompilation."""
    report = job.compile_report()
    assert report["graphs_captured"] == 4 + 2, report
    assert [r["function"] for r in report["recompilations"]] == ["forward"] * 3, report["recompilations"]
    assert all("modeling_t5.py" in r["where"] for r in report["recompilations"]), report["recompilations"]
    assert not any("for each layer" in f["problem"] for f in report["findings"]), report["findings"]
    assert "compiled whole" not in result.output
    return report


def test_a_t5s_blocks_compile_one_graph_per_kind_with_eagers_gradients(make_job, shared_cache):
    """T5's blocks are of one class, but each stack's first carries the relative position bias table the others
    reuse. A plain loop's torch.compile(model) (regional_loop.py --models t5, beside an eager twin) compiles its six
    blocks in place as four graphs, with eager's losses and gradients at every step, the tied embeddings still
    tied, and what torch.compile returns."""
    job = inductor_job(make_job, "compile/regional_loop.py", cache=shared_cache, models="t5")
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    run = job.read_json("output/data/regional_metrics.json")["t5"]
    assert run["returned"] == "OptimizedModule" and run["orig_mod_is_model"] and run["tied"], run
    assert_same_losses(run["eager_losses"], run["losses"])
    assert run["largest_gradient_difference"] < 1e-3, run       # as the GPT-2's: rounding, not a lost gradient
    assert ("regional compilation: torch.compile(T5ForConditionalGeneration) compiled its 6 repeated blocks in place, "
            f"{T5_SHARING}") in result.output
    report = t5_graphs_checked(job, result)
    assert T5_SHARING in report["compile_time_defaults"]["regional"], report


def test_the_trainer_compiles_a_t5_one_graph_per_kind_of_block(make_job, shared_cache):
    """The same T5 through the Trainer (tests/scripts/compile/t5_trainer.py, no torch_compile argument): accelerate's
    prepare_model compiles it through the backend's compile_blocks, four graphs for six blocks, and it trains as
    eager does."""
    common = {"max_steps": 6, "per_device_train_batch_size": 4, "learning_rate": 0.003, "logging_steps": 2,
              "save_strategy": "no", "report_to": "none", "optim": "adamw_torch", "seed": 0}
    job, result = trainer_beside_eager(make_job, "compile/t5_trainer.py", shared_cache, **common)
    assert f"regional compilation: 6 repeated blocks compiled in place, {T5_SHARING}" in result.output
    assert t5_graphs_checked(job, result)["optimizer_steps"] == 6


def test_a_second_identical_job_compiles_nothing_new(make_job, tmp_path):
    cache = tmp_path / "cold-cache"
    reports = []
    for _ in range(2):
        job = inductor_job(make_job, "compile/inductor_loop.py", cache=cache)
        result = run_train(job, CXX=shutil.which("g++"))   # a cold job's g++ is as slow as it is: no memo (conftest)
        assert result.returncode == 0, result.output[-5000:]
        reports.append(job.compile_report())
    cold, warm = reports
    # On a CPU the cold job runs torch's vector check once, in the background from its start, and keeps its proof;
    # the warm one skips the check, and still finds every kernel (the setting is part of Inductor's cache key, so
    # both jobs compiled with it).
    assert cold["compile_time_defaults"]["vec_isa"] in (
        "on: proven in the background, the proof kept for later jobs",
        "not used: a set the CPU reports failed torch's check"), cold
    proven = json.loads(next(cache.glob("inductor-torch-*/opentc-vec-isa.json")).read_text())["proven"]
    if proven:
        assert warm["compile_time_defaults"]["vec_isa"].startswith("on: TORCHINDUCTOR_VEC_ISA_OK=1 (proven"), warm
        assert "vec_isa: on: TORCHINDUCTOR_VEC_ISA_OK=1" in result.output
    assert cold["graphs_compiled"] >= 2 and cold["persistent_cache"]["misses"] >= 2, cold   # forward and backward
    assert cold["persistent_cache"]["dir"].startswith(str(cache / "inductor-torch-"))
    assert warm["graphs_compiled"] == 0 and warm["persistent_cache"]["misses"] == 0, warm
    assert warm["persistent_cache"]["hits"] == cold["persistent_cache"]["misses"], (cold, warm)
    assert warm["graphs_captured"] == cold["graphs_captured"]          # Dynamo traces again; Inductor does not
    assert warm["compile_seconds_total"] < cold["compile_seconds_total"], (cold, warm)
    assert f"0 graph(s) compiled in {warm['compile_seconds_total']:.1f} s" in result.output
    # Inductor's hashes of torch's and Triton's sources: computed by the cold job and kept for this installation,
    # given to torch by the warm one (torch 2.14's caches can be filled ahead; 2.7's cannot, and it hashes as before).
    from torch._inductor import codecache

    if callable(getattr(codecache.torch_key, "set", None)):
        kept = json.loads(next(cache.glob("inductor-torch-*/opentc-source-keys.json")).read_text())
        assert kept["torch_key"] == codecache.torch_key().hex() and kept["triton_key"] == codecache.triton_key()
        assert "torch's source hashes given from the cache folder: kept for this installation" in result.output
    else:
        assert "torch's source hashes not on this torch" in result.output


def test_the_compilation_limit_stops_the_worker_with_exit_4(make_job, shared_cache):
    job = inductor_job(make_job, "compile/inductor_loop.py", cache=shared_cache, shapes="changing", steps=8,
                       sagemaker_training_compiler_max_compilations=2)
    result = run_train(job)
    assert result.returncode == exit_codes.COMPILATION_LIMIT, result.output[-5000:]
    assert job.failure.splitlines()[1].startswith(
        "compilation limit reached: 3 graphs captured by torch.compile (Dynamo), more than the 2 allowed"), job.failure
    report = job.compile_report()
    assert report["exit_code"] == exit_codes.COMPILATION_LIMIT and report["graphs_captured"] == 3, report
    assert not (job.output / "data" / "loop_metrics.json").exists()     # stopped before the script's end
    summary = job.read_json("output/data/job-summary.json")              # the worker's record, written as it stopped
    assert summary["processes"][0]["exit_code"] == exit_codes.COMPILATION_LIMIT and summary["compile"], summary


def test_a_graph_break_is_reported_with_its_source_line(make_job, shared_cache):
    job = inductor_job(make_job, "compile/inductor_loop.py", cache=shared_cache, graph_break="yes")
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    line = next(i for i, text in enumerate(LOOP.read_text().splitlines(), 1) if "GRAPH BREAK" in text)
    report = job.compile_report()
    assert report["graph_breaks_total"] >= 1, report
    where = [b["where"] for b in report["graph_breaks"]]
    assert f"{job.root / 'code' / 'compile' / 'inductor_loop.py'}:{line}" in where, report["graph_breaks"]
    assert "print" in json.dumps(report["graph_breaks"])
    assert any(f["problem"].startswith(f"{report['graph_breaks_total']} graph break(s)") for f in report["findings"])
    assert f"inductor_loop.py:{line}" in result.output                     # in the log too, with the fix
    assert "Graph break in user code" not in result.output                 # Dynamo's own log stays quiet


def test_recompilations_are_named_with_dynamos_reason(tmp_path, shared_cache):
    """Shapes that change every step after warm-up (--warmup-steps 1): the report says so, with the fix and
    Dynamo's own reason for each recompilation."""
    import subprocess

    report_dir = tmp_path / "report"
    proc = subprocess.run([str(BIN / "opentc-worker"), "--backend", "inductor", "--device", "cpu",
                           "--compile-report-dir", str(report_dir), "--compile-cache-dir", str(shared_cache),
                           "--warmup-steps", "1", str(LOOP), "--shapes", "changing", "--steps", "5"],
                          env=clean_env(SM_OUTPUT_DATA_DIR=str(tmp_path)), cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    report = json.loads((report_dir / "compile-report-rank0.json").read_text())
    assert report["graphs_after_warmup"] >= 3 and report["steps_with_late_graphs"] >= 3, report
    assert any("size mismatch" in r["reason"] for r in report["recompilations"]), report["recompilations"]
    problem = report["findings"][0]["problem"]
    assert "input shapes are changing between steps" in problem and "Dynamo's reasons:" in problem, problem
    assert "padding='max_length'" in report["findings"][0]["fix"]
    assert "new graphs keep being compiled after warm-up" in proc.stdout   # while the job ran


def test_two_cpu_workers_train_with_ddp_and_compile_over_gloo(make_job, shared_cache):
    """Several Inductor workers on CPU are allowed (unlike XLA:CPU): gloo has real collectives."""
    job = inductor_job(make_job, "ddp_compile.py", cache=shared_cache,
                       sagemaker_pytorch_xla_multi_worker_enabled=True)
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-5000:]
    records = [job.read_json(f"model/ddp-rank{rank}.json") for rank in range(2)]
    assert all(r["world"] == 2 and r["replicas_equal"] and not r["torch_xla_imported"] for r in records), records
    assert records[0]["weights_sum"] == records[1]["weights_sum"]
    for rank in range(2):
        report = job.compile_report(rank)
        assert report["world_size"] == 2 and report["graphs_captured"] >= 1, report
        assert report["graph_breaks_total"] == 0, report


def test_compiling_the_ddp_wrapper_is_named_with_the_order_that_compiles(make_job, shared_cache):
    """torch.compile(DDP(model)) breaks inside DDP on torch 2.7 and compiles nothing: the job still trains (eager),
    and the report says so and gives the order that compiles."""
    job = inductor_job(make_job, "ddp_compile.py", cache=shared_cache, order="wrap_then_compile",
                       sagemaker_pytorch_xla_multi_worker_enabled=True)
    result = run_train(job, OPENTC_WORKERS_PER_HOST="2")
    assert result.returncode == 0, result.output[-5000:]
    assert all(job.read_json(f"model/ddp-rank{rank}.json")["replicas_equal"] for rank in range(2))
    report = job.compile_report()
    problems = [f["problem"] for f in report["findings"]]
    assert problems[0].startswith("nothing was compiled in this process"), problems
    assert any("nn/parallel/distributed.py" in p for p in problems), problems
    assert "DistributedDataParallel(torch.compile(model))" in result.output


def test_debug_mode_writes_the_trace_the_logs_and_tlparses_report(make_job, shared_cache):
    job = inductor_job(make_job, "compile/inductor_loop.py", cache=shared_cache, graph_break="yes",
                       sagemaker_training_compiler_debug_mode=True)
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    folder = job.compiler_output
    traces = sorted((folder / "torch_trace").glob("*.log"))
    assert traces, sorted(p.name for p in folder.iterdir())
    assert "graph_breaks" in (folder / "torch_logs.txt").read_text() or \
        "Graph break" in (folder / "torch_logs.txt").read_text()
    reports = sorted((folder / "tlparse").glob("*/index.html"))
    assert len(reports) == len(traces) and "<html" in reports[0].read_text().lower()
    assert "Graph break in user code" in result.output      # debug mode: Dynamo's own log in the job's log

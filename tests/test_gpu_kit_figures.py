"""The GPU kit's rules (dev/gpu-kit), in-process: the largest-batch search, MFU of a bench row, the steps' order and
what each builds on, the budget (a step starts only when what is left covers its expected seconds, and is stopped,
its whole process group, at what is left), and what the device tool brings back from $OUT. No GPU here: the search is
driven by a stand-in for "does this batch fit", and the budget by real short processes."""

import importlib.machinery
import importlib.util
import json
import os
import sys
import time

import pytest

from conftest import REPO

_loader = importlib.machinery.SourceFileLoader("gpu_kit", str(REPO / "dev" / "gpu-kit"))
_spec = importlib.util.spec_from_loader("gpu_kit", _loader)
kit = importlib.util.module_from_spec(_spec)
sys.modules["gpu_kit"] = kit   # its dataclasses look their module up by name
_loader.exec_module(kit)

GPT2_SMALL_FLOPS_PER_TOKEN = 798_543_360   # bench_worker's count for GPT-2 small at sequence 512


@pytest.mark.parametrize(("capacity", "start", "found"), [
    (0, 8, (0, 8, True)), (8, 8, (8, 16, True)), (100, 8, (96, 104, True)), (127, 8, (120, 128, True)),
    (128, 8, (128, 136, True)), (4096, 8, (4096, None, True)), (10**6, 8, (4096, None, True)),
    (150, 96, (144, 152, True)),   # Inductor's search, from eager's largest
    (60, 96, (56, 64, True)),      # ... when even that does not fit: bisected below it
])
def test_the_largest_batch_is_found_by_doubling_then_bisecting_to_within_eight(capacity, start, found):
    tried = []

    def fits(batch):
        tried.append(batch)
        return batch <= capacity

    assert kit.search_largest(fits, start=start) == found
    assert len(tried) == len(set(tried)) <= 16   # each batch tried once, in a handful of fresh processes


def test_a_search_out_of_time_says_what_it_knows_as_a_bound():
    tried = []

    def fits(batch):
        if len(tried) == 3:
            raise TimeoutError
        tried.append(batch)
        return True

    assert kit.search_largest(fits) == (32, None, False)   # 8, 16, 32 fitted; 64 never tried


@pytest.mark.parametrize(("gpu", "tokens_per_s", "world", "expected"), [
    ("NVIDIA H100 80GB HBM3", 463_000, 1, "37.4%"),      # llm.c's H100 figure: "about 40%"
    ("NVIDIA A100-SXM4-80GB", 231_000, 1, "59.1%"),      # llm.c's A100 figure: "about 60%"
    ("NVIDIA H100 PCIe", 463_000, 1, "48.9%"),           # the PCIe card's lower peak, not the SXM's
    ("NVIDIA H100 80GB HBM3", 926_000, 2, "37.4%"),      # a DDP row's tokens/s are the world's: per GPU
    ("Tesla T4", 463_000, 1, ""),                        # no bf16 peak: said as unknown, not guessed
    ("cpu (rehearsal)", 463_000, 1, ""),
])
def test_a_bench_rows_mfu_is_over_the_gpus_dense_bf16_peak(gpu, tokens_per_s, world, expected):
    row = {"tokens_per_s": tokens_per_s, "flops_per_token": GPT2_SMALL_FLOPS_PER_TOKEN, "world": world, "dtype": "bf16"}
    assert kit.mfu(row, gpu) == expected


@pytest.mark.slow
def test_flops_per_token_is_six_times_the_weights_plus_attention():
    """GPT-2 small at sequence 512: 123,653,376 weights without the position embeddings (the output layer shares the
    token embeddings), so 6N = 741,920,256, plus 12 x 12 layers x 768 wide x 512 = 56,623,104 for attention."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import torch
    from bench_worker import flops_per_token
    from transformers import GPT2Config, GPT2LMHeadModel

    with torch.device("meta"):   # shapes only: nothing allocated or initialised
        model = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=512, n_layer=12, n_head=12, n_embd=768))
    assert flops_per_token(model) == 6 * 123_653_376 + 12 * 12 * 768 * 512 == GPT2_SMALL_FLOPS_PER_TOKEN


LAYOUT = kit.Layout("python3", "/tmp/work", "/tmp/out")


@pytest.mark.parametrize(("figures", "expected"), [
    ({1}, ["like-plain", "like-eager", "like-head", "like-before", "like-largest", "like-table"]),
    ({2}, ["like-plain-whole", "like-whole", "like-sync-free"]),
    ({3}, ["bench-eager", "bench-cold", "bench-warm"]),
    ({4, 7}, ["clm-off", "clm-inductor", "clm-table", "nested"]),
    ({5}, ["largest-eager", "largest-inductor"]),
    ({8}, ["ddp-eager", "ddp-inductor"]),
    ({9}, ["profile-eager", "profile-inductor", "profile-whole"]),
])
def test_run_figures_picks_the_install_steps_then_the_figures_asked_for_in_order(figures, expected):
    steps = kit.steps(LAYOUT, 2, kit.GPU)
    picked = [s.key for s in kit.chosen(steps, figures)]
    install = [s.key for s in steps if s.figure == 0]
    assert install == ["venv", "link", "pip", "missing", "ours"]
    assert picked == install + expected


@pytest.mark.parametrize("scale", [kit.GPU, kit.CPU])
def test_the_steps_run_in_the_order_of_their_value_each_after_what_it_builds_on(scale):
    steps = kit.steps(LAYOUT, 2, scale)
    figures = [s.figure for s in steps]
    assert figures == sorted(figures)   # the install, then figure 1 (the most valuable), 2, ...
    keys = [s.key for s in steps]
    assert len(keys) == len(set(keys))
    for i, s in enumerate(steps):
        assert set(s.needs) <= set(keys[:i]), s.key
        assert s.expected_s > 0 and s.bound_s >= s.expected_s
    # Only the plot is written under $OUT; jobs, caches and the venv go to the temporary folder.
    written = [a for s in steps for a in s.argv if a.startswith(LAYOUT.out)]
    assert written == [os.path.join(LAYOUT.out, "sample.png")]
    assert all(os.path.join(LAYOUT.work, s.job).startswith(LAYOUT.work) for s in steps if s.job)


def test_steps_asked_for_by_key_run_after_the_install_in_the_plans_order():
    steps = kit.steps(LAYOUT, 2, kit.GPU)
    picked = [s.key for s in kit.chosen(steps, set(kit.FIGURES), {"clm-off", "like-table", "like-plain"})]
    assert picked == ["venv", "link", "pip", "missing", "ours", "like-plain", "like-table", "clm-off"]


@pytest.mark.parametrize(("argv", "said"), [
    (["rehearse", "--steps", "like-plain,nope"], "--steps like-plain,nope: keys of the steps `dev/gpu-kit plan` "
                                                 "lists, comma-separated: like-plain, like-eager, like-head"),
    (["rehearse", "--steps", "venv"], "--steps venv: keys of the steps"),   # the install runs anyway
    (["run", "--figures", "1", "--steps", "like-plain"], "--figures and --steps: give one of them"),
])
def test_steps_and_figures_asked_wrongly_are_refused_by_name(argv, said, capsys):
    with pytest.raises(SystemExit) as stopped:
        kit.main([*argv, "--python", sys.executable])
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("scale", [kit.GPU, kit.CPU])
def test_like_for_like_trains_the_same_model_and_shape_in_the_trainer_and_the_plain_loop(scale, tmp_path):
    """The Trainer's jobs (run_clm_tiny's hyperparameters) and the plain loop (bench_worker's arguments) agree on
    the model (layers, heads, width, vocabulary, dropout), the batch, the sequence, the dtype and the optimizer; each
    job's compiler settings are its variant's."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_worker

    bench = dict(zip(scale.like_bench[::2], scale.like_bench[1::2], strict=False))
    flags = set(scale.like_bench)
    jobs = {}
    for like in kit.LIKE:
        job = tmp_path / f"like-{like.name}"
        kit.prepare_job(job, scale, tmp_path)
        encoded = json.loads((job / "input" / "config" / "hyperparameters.json").read_text())
        jobs[like.name] = {key: json.loads(value) for key, value in encoded.items()}
    clm = jobs["eager"]
    model = dict(pair.split("=") for pair in clm["config_overrides"].split(","))
    config = bench_worker.CONFIGS[bench["--config"]]
    assert {k: int(model[k]) for k in config} == config
    assert int(model.get("n_inner", 4 * int(model["n_embd"]))) == config.get("n_inner", 4 * config["n_embd"])
    assert int(model["vocab_size"]) == bench_worker.VOCABS.get(bench["--config"], bench_worker.VOCAB)
    assert {float(model[k]) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")} == {float(bench["--dropout"])}
    assert clm["block_size"] == int(bench["--seq"]) and clm["per_device_train_batch_size"] == int(bench["--batch"])
    assert clm["bf16"] is (bench["--dtype"] == "bf16")
    assert (clm["optim"] == "adamw_torch_fused") is ("--fused-adamw" in flags) and "--overlap" in flags
    assert all({k: v for k, v in job.items() if not k.startswith("sagemaker_") and k not in ("output_dir",)} ==
               {k: v for k, v in clm.items() if not k.startswith("sagemaker_") and k not in ("output_dir",)}
               for job in jobs.values())
    compiler = {name: {k.removeprefix("sagemaker_training_compiler_"): v for k, v in job.items()
                       if k.startswith("sagemaker_training_compiler_")} for name, job in jobs.items()}
    assert compiler == {
        "eager": {"enabled": False},
        "before": {"enabled": True, "backend": "inductor", "defaults_off": "head", "library_patches": False},
        "sync-free": {"enabled": True, "backend": "inductor", "defaults_off": "head"},
        "head": {"enabled": True, "backend": "inductor"},
        "whole": {"enabled": True, "backend": "inductor", "defaults_off": "regional"}}
    planned = {v for variants in kit.PLAIN_VARIANTS.values() for v in variants.split(",")}
    assert {like.plain for like in kit.LIKE} == planned <= set(bench_worker.VARIANTS)


def test_the_seeds_run_clm_jobs_keep_their_own_shape_and_compiler(tmp_path):
    """Figure 4's jobs (the seeds' run_clm at its 8,000-token vocabulary), made by the same function as the
    like-for-like jobs: their own hyperparameters, the compiler off and Inductor with its defaults."""
    made = {}
    for name in ("run-clm-off", "run-clm-inductor"):
        kit.prepare_job(tmp_path / name, kit.GPU, tmp_path)
        encoded = json.loads((tmp_path / name / "input" / "config" / "hyperparameters.json").read_text())
        made[name] = {key: json.loads(value) for key, value in encoded.items()}
    for name, compiler in (("run-clm-off", {"sagemaker_training_compiler_enabled": False}),
                           ("run-clm-inductor", kit.INDUCTOR)):
        assert {k: v for k, v in made[name].items() if k.startswith("sagemaker_training_compiler_")} == compiler
        assert {k: made[name][k] for k in kit.GPU.run_clm} == kit.GPU.run_clm
        assert made[name]["sagemaker_program"] == "run_clm_tiny.py" and made[name]["logging_steps"] == 10


H100_MB = 81_559   # an H100 80GB's memory as CUDA gives it


def test_the_largest_batch_is_searched_from_what_the_memory_at_batch_8_predicts():
    """Eager's row on the H100 (GPT-2 small at batch 8: 7,139 MB at the peak) predicts 96, the largest that fitted
    there (112 did not); without a GPU's memory (the CPU rehearsal) the search starts where it always did."""
    head = {"batch": 8, "peak_memory_mb": 7139.4, "parameters": 124_046_592, "device_memory_mb": H100_MB}
    results = {"steps": [{"key": "like-plain", "status": "ok", "variants": {"head": head}}]}
    assert kit.predicted_largest(results) == 96
    inductor = {**head, "peak_memory_mb": 3883.0}   # Inductor's peak at batch 8 in the first figures
    assert kit.predicted_largest({"steps": [{"key": "like-plain", "variants": {"head": inductor}}]}) == 264
    for row in ({**head, "device_memory_mb": None}, {**head, "peak_memory_mb": 1000.0}):
        assert kit.predicted_largest({"steps": [{"key": "like-plain", "variants": {"head": row}}]}) == 8
    assert kit.predicted_largest({"steps": []}) == kit.LARGEST_START


def test_the_compare_table_gets_the_like_for_like_jobs_that_succeeded_in_the_tables_order():
    step = next(s for s in kit.steps(LAYOUT, 1, kit.GPU) if s.key == "like-table")
    results = {"steps": [{"key": "like-head", "status": "ok"}, {"key": "like-eager", "status": "ok"},
                         {"key": "like-before", "status": "exit code 1"}]}
    assert kit.resolved(step.argv, results, LAYOUT) == [
        LAYOUT.bin("opentc-compare"), LAYOUT.job("like-eager"), LAYOUT.job("like-head")]
    largest = next(s for s in kit.steps(LAYOUT, 1, kit.GPU) if s.key == "like-largest")
    assert kit.resolved(largest.argv, results, LAYOUT)[-2:] == ["--start", "8"]


def plain(variant, step_s, compile_s=None, reads=0.0, syncs=None):
    return {"variant": variant, "config": "gpt2", "batch": 8, "seq": 512, "dtype": "bf16", "dropout": 0.1,
            "fused_adamw": True, "median_step_s": step_s, "tokens_per_s": 4096 / step_s,
            "flops_per_token": GPT2_SMALL_FLOPS_PER_TOKEN, "compile_s": compile_s, "host_reads_per_step": reads,
            "cuda_syncs_per_step": syncs, "peak_memory_mb": 4000.0}


def trainer(step_s, compile_s=None, reads=0.0):
    return {"median_step_s": step_s, "tokens_per_s": 4096 / step_s, "flops_per_token": None, "compile_s": compile_s,
            "host_reads_per_step": reads, "peak_memory_mb": 5000.0, "dtype": "bf16"}


def test_the_like_for_like_table_puts_each_trainer_job_beside_the_plain_loop_compiled_alike():
    """Made-up figures, GPT-2 small on an H100: each variant's Trainer row, the plain loop compiled the same way
    (its blocks-only row once; the defaults now compile no head region on a GPU, so their plain loop is the blocks,
    and on a CPU the head), the Trainer's step over the plain loop's from tokens/s, MFU from the plain loop's FLOPs
    where a CPU job's summary has none, and the issue's goals."""
    results = {"gpu": "NVIDIA H100 80GB HBM3", "steps": [
        {"key": "like-plain", "step": "the plain loop", "status": "ok", "seconds": 120, "expected_s": 130,
         "variants": {"eager": plain("eager", 0.0468, reads=1.0, syncs=1.0), "head": plain("head", 0.0250, 20.0),
                      "blocks": plain("blocks", 0.0280, 13.0)}},
        {"key": "like-plain-whole", "step": "whole", "status": "ok", "expected_s": 90,
         "variants": {"whole": plain("whole", 0.0267, 45.0)}},
        {"key": "like-eager", "expected_s": 60, "step": "eager", "status": "ok", "result": trainer(0.0515, reads=0.0)},
        {"key": "like-head", "expected_s": 60, "step": "head", "status": "ok", "result": trainer(0.0270, 22.0)},
        {"key": "like-before", "expected_s": 60, "step": "before", "status": "ok",
         "result": trainer(0.0480, 13.1, reads=3.0)},
        {"key": "like-largest", "expected_s": 60, "step": "largest", "status": "ok", "result": {
            "largest_batch": 264, "first_that_failed": 528, "settled": False, "tries": [
                {"batch": 264, "seconds": 50.0, "tokens_per_s": 200_000.0,
                 "flops_per_token": GPT2_SMALL_FLOPS_PER_TOKEN, "dtype": "bf16"},
                {"batch": 528, "seconds": 45.0, "oom": True}]}},
        {"key": "like-whole", "expected_s": 90, "step": "whole",
         "status": "not started: 40 s of the budget left, it expects 90 s"},
    ]}
    text = kit.summary(results)
    table = text[text.index(kit.LIKE_HEADER):]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert rows[0].startswith("| eager (the compiler off; the sync-free step on, as the image runs it) | the Trainer "
                              "| 51.5 | 79,534 | 6.4% | | 0 | 5,000 | 1.10x |")
    assert rows[1] == "| | the plain loop (eager) | 46.8 | 87,521 | 7.1% | | 1; 1 CUDA syncs | 4,000 | |"
    assert rows[2].startswith("| Inductor, the defaults before: the blocks only, library patches off | the Trainer | "
                              "48.0 | 85,333 | 6.9% | 13.1 | 3 | 5,000 | 1.71x |")
    assert rows[3] == "| | the plain loop (blocks) | 28.0 | 146,286 | 11.8% | 13.0 | 0 | 4,000 | |"
    assert rows[4].startswith("| Inductor, the defaults now: the blocks (and the head, on a CPU), the sync-free step | "
                              "the Trainer | 27.0 | 151,704 | 12.2% | 22.0 | 0 | 5,000 | 0.96x |")
    assert rows[5] == "| | the plain loop (blocks) | as above | | | | | | |"
    assert rows[6] == ("| Inductor, the whole model, the sync-free step | the Trainer | not started: 40 s of the "
                       "budget left, it expects 90 s | | | | | | |")
    assert rows[7].startswith("| | the plain loop (whole) | 26.7 |")
    assert len(rows) == 8   # the sync-free step alone was not in this call: no row
    assert "- The Trainer's step over the plain loop's at the same shape (the goal: within 1.10x): eager 1.10x, " \
           "before 1.71x, head 0.96x." in table
    assert "- The Trainer with Inductor, the defaults now: 1.91x its eager speed (the goal: at least 1.5x)." in table
    assert "- The Trainer's Inductor step, before and after: 48.0 -> 27.0 ms (median)." in table
    assert "- Inductor's largest plain-loop batch (blocks and head): 264 (first that failed: 528, out of time: a " \
           "lower bound; 2 tries), MFU there 16.1% (the goal: 30%)." in table
    assert "| the plain loop | ok | 120 (130) | 3 measurements: the tables below | | | | |" in text
    assert kit.like_table({"steps": [{"key": "clm-off", "status": "ok", "result": trainer(0.05)}]}, "") == []
    on_a_cpu = kit.like_table({**results, "scale": "cpu"}, "")
    assert "| | the plain loop (head) | 25.0 | 163,840 | | 20.0 | 0 | 4,000 | |" in on_a_cpu, on_a_cpu
    assert "head 1.08x." in "\n".join(on_a_cpu)


def test_a_jobs_summary_gives_its_row(tmp_path):
    summary = {"backend": "inductor", "optimizer_steps": 40, "step_seconds": {"median": 0.027, "measured_steps": 35},
               "throughput": {"tokens_per_second": 150_000.0}, "compile": {"seconds": 22.0, "graphs_compiled": 6},
               "utilisation": {"mfu": 0.121, "flops_per_token": 798_543_360, "dtype": "bf16"},
               "peak_memory_mb": 2600.0, "host_reads": {"per_step": 0, "every_step_at": []},
               "first_step_seconds": 40.0, "wall_seconds": 55.0}
    (tmp_path / "job" / "output" / "data").mkdir(parents=True)
    (tmp_path / "job" / "output" / "data" / "job-summary.json").write_text(json.dumps(summary))
    row = kit.job_row(tmp_path / "job")
    assert {k: row[k] for k in ("median_step_s", "tokens_per_s", "compile_s", "host_reads_per_step", "mfu",
                                "flops_per_token", "peak_memory_mb")} == {
        "median_step_s": 0.027, "tokens_per_s": 150_000.0, "compile_s": 22.0, "host_reads_per_step": 0,
        "mfu": 0.121, "flops_per_token": 798_543_360, "peak_memory_mb": 2600.0}
    assert kit.job_row(tmp_path / "no-job") is None


def test_the_largest_inductor_batch_is_searched_from_eagers():
    step = next(s for s in kit.steps(LAYOUT, 1, kit.GPU) if s.key == "largest-inductor")
    assert step.argv[-2:] == ("--start", kit.EAGER_LARGEST)
    found = {"steps": [{"key": "largest-eager", "result": {"largest_batch": 96}}]}
    assert kit.eager_largest(found) == 96 and kit.eager_largest({"steps": []}) == kit.LARGEST_START


def running(pid):
    """Whether `pid` runs (a zombie, killed and waiting for whoever reaps it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def python(code):
    return (sys.executable, "-c", code)


@pytest.mark.slow
def test_the_budget_starts_a_step_only_when_what_is_left_covers_it_and_stops_it_there(tmp_path):
    """Real processes: one that prints a bench row; one expecting more than is left (not started); one building on
    it (not started); one that outlives the budget, with a child of its own: both stopped at the budget's end."""
    pid_file = tmp_path / "grandchild.pid"
    steps = [
        kit.Step("quick", "a quick one", 1, python('print("BENCH_RESULT " + \'{"median_step_s": 0.01, "tokens_per_s": '
                                                    '5.0, "peak_memory_mb": 1.0}\')'), 1),
        kit.Step("long", "expects more than is left", 1, python("pass"), 600),
        kit.Step("after-long", "builds on the long one", 1, python("pass"), 1, needs=("long",)),
        kit.Step("stuck", "outlives the budget", 1, python(
            "import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(600)']); open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(600)"), 1),
    ]
    at = kit.Layout(sys.executable, str(tmp_path / "work"), str(tmp_path / "out"))
    os.makedirs(at.out)
    results = {"steps": []}
    began = time.monotonic()
    kit.execute(steps, at, kit.CPU, 12, results)
    assert time.monotonic() - began < 60   # the budget (12 s) and the stopping, not the 600 s the steps asked for
    status = {s["key"]: s["status"] for s in results["steps"]}
    assert status["quick"] == "ok" and results["steps"][0]["result"]["tokens_per_s"] == 5.0
    assert status["long"].startswith("not started: ") and "it expects 600 s" in status["long"]
    assert status["after-long"] == "not started: it builds on long, which did not succeed"
    assert status["stuck"].startswith("stopped at ")
    grandchild = int(pid_file.read_text())
    assert not running(grandchild)   # the step's whole process group went with it
    written = json.loads((tmp_path / "out" / "gpu-figures.json").read_text())
    assert [s["key"] for s in written["steps"]] == ["quick", "long", "after-long", "stuck"]
    assert (tmp_path / "out" / "gpu-kit.log").read_text().count("### ") == 2   # the two that ran
    assert not kit.out_problems(tmp_path / "out")


def test_what_the_device_tool_would_not_bring_back_is_named(tmp_path):
    assert kit.out_problems(tmp_path) == []
    for i in range(9):
        (tmp_path / f"f{i}.json").write_text("{}")
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c" / "deep.txt").write_text("x")
    (tmp_path / "odd name.txt").write_text("x")
    with open(tmp_path / "large.bin", "wb") as f:
        f.truncate(17 * 2**20)   # sparse: takes no disk
    problems = "\n".join(kit.out_problems(tmp_path))
    assert "12 files: at most 8 come back" in problems
    assert "large.bin: 17825792 bytes, over 16777216" in problems
    assert "a/b/c/deep.txt: more than 2 folders down" in problems
    assert "odd name.txt: a name with characters other than" in problems


# --- issue 40 K: bad input is one line, never a traceback, and pack never deletes the kit it cannot replace ---

def test_a_pack_that_cannot_download_leaves_the_kit_it_had(tmp_path, monkeypatch, capsys):
    """`pack` without the index removed the kit first, then failed: nothing left to carry."""
    wheels = tmp_path / "kit" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "boto3-1.0-py3-none-any.whl").write_bytes(b"the kit it had")
    monkeypatch.setattr(kit, "KIT", tmp_path / "kit")
    monkeypatch.setattr(kit, "WHEELS", wheels)
    monkeypatch.setattr(kit, "REPO", tmp_path)
    monkeypatch.setattr(kit, "pins", lambda: {})

    def no_index(argv, **kwargs):
        return kit.subprocess.CompletedProcess(argv, 1, "ERROR: Could not find a version that satisfies the "
                                                        "requirement pip (from versions: none)\n")

    monkeypatch.setattr(kit.subprocess, "run", no_index)
    assert kit.pack() == 1
    assert [p.name for p in wheels.iterdir()] == ["boto3-1.0-py3-none-any.whl"]
    assert (wheels / "boto3-1.0-py3-none-any.whl").read_bytes() == b"the kit it had"
    assert sorted(p.name for p in (tmp_path / "kit").iterdir()) == ["wheels"]      # nothing half-made left
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith("dev/gpu-kit pack: pip download ") and \
        said.rstrip().endswith("(from versions: none); the kit in kit/wheels is left as it was"), said


def git(folder, *args):
    kit.subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)


def test_plan_outside_a_git_checkout_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(kit, "REPO", tmp_path)
    monkeypatch.setattr(kit, "KIT", tmp_path / ".work" / "gpu-kit")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))   # no checkout above it either
    assert kit.main(["plan"]) == 2
    said = capsys.readouterr()
    assert said.err.count("\n") == 1 and said.err.startswith(f"dev/gpu-kit plan: {tmp_path} is not a git checkout"), \
        said.err


def test_plan_lists_a_file_whose_name_is_not_utf8(tmp_path, monkeypatch):
    git(tmp_path, "init", "-q")
    name = os.fsdecode(b"notes-\xff.txt")
    (tmp_path / name).write_bytes(b"12345")
    monkeypatch.setattr(kit, "REPO", tmp_path)
    monkeypatch.setattr(kit, "KIT", tmp_path / ".work" / "gpu-kit")
    assert kit.carried_files() == [(name, 5)]


@pytest.mark.parametrize("command", [["largest-batch", "--backend", "eager"], ["rehearse"], ["run"],
                                     ["install", "--venv", "/tmp/never-made"]])
def test_a_python_that_is_not_there_is_one_line(command, capsys):
    assert kit.main([*command, "--python", "/missing/python3"]) == 2
    said = capsys.readouterr().err
    assert said == (f"dev/gpu-kit {command[0]}: --python /missing/python3 is not a Python this can run: give the path "
                    f"of a python executable (or a name on PATH)\n")


def test_a_trainer_rows_name_says_where_the_head_was_left_eager(tmp_path):
    """The kit's row for a job that asked for the head region says so where the job's compile report says the head
    was left eager (a bf16 Trainer job on the H200: accelerate wraps its forward), read from a report as the launcher
    writes it; the kit, standard library only, keeps its own copy of the words."""
    from opentc_launcher.inductor.compile_time import HEAD_LEFT

    assert kit.HEAD_LEFT == HEAD_LEFT
    job = tmp_path / "like-head"
    assert kit.compiled_head(job) is None                                    # no report: nothing said
    (job / kit.REPORT).parent.mkdir(parents=True)
    why = "accelerate's mixed precision wraps its forward (autocast, its outputs made fp32)"
    state = f"on: the model's own forward around its blocks (output layer, loss) as one region; {HEAD_LEFT}{why}"
    (job / kit.REPORT).write_text(json.dumps({"compile_time_defaults": {"head": state}}))
    assert kit.compiled_head(job) == state
    assert kit.head_left({"head": state}) == f" (the head left eager: {why})"
    assert kit.head_left({"head": "on: the model's own forward around its blocks"}) == ""
    assert kit.head_left(None) == ""


def test_figure_nines_table_says_how_busy_the_device_was_and_what_the_host_did():
    """Made-up figures in trainer_step_profile.py's form (its real run on the CPU: tests/test_benchmark_script.py):
    each profiled run's steps, the device's busy time and share, its synchronizing calls and kernel launches, and the
    host's four largest Python self times; a run that did not finish has no row, and none at all gives no table."""
    def profiled(step_s, busy_s, syncs):
        return {"median_step_s": step_s, "window_step_s": step_s * 1.1, "device_busy_step_s": busy_s,
                "device_busy_share": busy_s / (step_s * 1.1), "synchronizing_calls_a_step": syncs,
                "kernel_launches_a_step": 412.0,
                "host_top_python": [{"function": f"trainer.py:{n}(f{n})", "self_ms_a_step": 5.0 - n,
                                     "calls_a_step": 1.0} for n in range(6)]}

    results = {"gpu": "NVIDIA H200", "steps": [
        {"key": "profile-eager", "step": "where the Trainer's step goes, eager", "status": "ok", "expected_s": 45,
         "seconds": 30, "result": profiled(0.033, 0.031, {"cudaStreamSynchronize": 1.0})},
        {"key": "profile-inductor", "step": "where the Trainer's step goes, Inductor's defaults", "status": "ok",
         "expected_s": 60, "seconds": 40, "result": profiled(0.0295, 0.0165, {})},
        {"key": "profile-whole", "step": "where the Trainer's step goes, Inductor on the whole model",
         "status": "stopped at its bound", "expected_s": 90}]}
    lines = kit.profile_table(results)
    rows = [line for line in lines if line.startswith("| where")]
    assert rows == [
        "| where the Trainer's step goes, eager | 33.0 | 36.3 | 31.0 | 85% | cudaStreamSynchronize 1 | 412 | "
        "trainer.py:0(f0) 5.0; trainer.py:1(f1) 4.0; trainer.py:2(f2) 3.0; trainer.py:3(f3) 2.0 |",
        "| where the Trainer's step goes, Inductor's defaults | 29.5 | 32.5 | 16.5 | 51% | 0 | 412 | "
        "trainer.py:0(f0) 5.0; trainer.py:1(f1) 4.0; trainer.py:2(f2) 3.0; trainer.py:3(f3) 2.0 |"]
    assert "\n".join(lines) in kit.summary(results)
    assert kit.profile_table({"steps": results["steps"][2:]}) == []


def test_figure_tens_table_sets_cuda_graphs_beside_eager_and_the_default_mode():
    """Made-up figures in bench_worker's form (its real run on the CPU, where torch skips the graphs: `dev/gpu-kit
    rehearse --steps graphs-plain`): each variant's step, its speed against eager's in the same process, its MFU,
    compile seconds and the graphs that ran without CUDA graphs; one out of memory says so; no step, no table."""
    def row(step_s, **more):
        return {"median_step_s": step_s, "tokens_per_s": 4096 / step_s, "flops_per_token": 8e8, "dtype": "bf16",
                "peak_memory_mb": 4700.0, **more}

    step = {"key": "graphs-plain", "step": "CUDA graphs", "status": "ok", "expected_s": 110, "seconds": 95,
            "variants": {"eager": row(0.032), "whole": row(0.016, compile_s=27.4),
                         "cudagraphs": row(0.0128, compile_s=30.1, cudagraph_skips=0)}}
    results = {"gpu": "NVIDIA H200", "steps": [step]}
    rows = [line for line in kit.graphs_table(results, "NVIDIA H200") if line.startswith("| ") and "ms)" not in line]
    assert rows == ["| eager | 32.0 | 128,000 | 1.00x | 10.4% | | | 4,700 |",
                    "| whole | 16.0 | 256,000 | 2.00x | 20.7% | 27.4 | | 4,700 |",
                    "| cudagraphs | 12.8 | 320,000 | 2.50x | 25.9% | 30.1 | 0 | 4,700 |"], rows
    step["variants"]["cudagraphs"] = {"oom": True}
    assert "| cudagraphs | out of memory | | | | | | |" in kit.graphs_table(results, "NVIDIA H200")
    assert "\n".join(kit.graphs_table(results, "NVIDIA H200")) in kit.summary(results)
    assert kit.graphs_table({"steps": []}, "NVIDIA H200") == []

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
    ({1}, ["bench-eager", "bench-cold", "bench-warm"]),
    ({2, 5}, ["clm-off", "clm-inductor", "clm-table", "nested"]),
    ({3}, ["largest-eager", "largest-inductor"]),
    ({6}, ["ddp-eager", "ddp-inductor"]),
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

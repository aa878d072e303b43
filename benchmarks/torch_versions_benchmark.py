"""TorchInductor on the xla image's torch (2.7) and on the inductor image's (2.14), each against its own eager, side by
side in one run on one machine.

    .venv/bin/python benchmarks/torch_versions_benchmark.py [--stack NAME=PYTHON ...] [--quick] [--json FILE]

Default stacks: the xla flavour's (.venv, dev/setup) and the inductor flavour's (.venv-inductor, dev/setup inductor).
Every measurement is a fresh process of that stack's Python, interleaved stack by stack so that a busy spell of the
machine falls on both:
1. GPT-2 tiny and small (bench_worker.py: fixed shapes, full training steps): eager, Inductor on a cold cache, and
   Inductor again on the cache the cold run left (warm);
2. the Hugging Face Trainer (tests/scripts/run_clm_tiny.py through that stack's opentc-worker): eager, Inductor cold,
   Inductor warm (accelerate compiles the model: ACCELERATE_DYNAMO_BACKEND=inductor, as the toolkit sets it).
Measured: compile seconds (cold and warm), time from process start to the end of the first optimizer step, median
step after warm-up, peak memory (the process's peak resident memory on CPU). Prints markdown tables, writes JSON.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiler_benchmark import publish, table
from trainer_benchmark import PEAK, SCRIPT, write_corpus

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_STACKS = {"torch 2.7 (xla image)": REPO / ".venv" / "bin" / "python",
                  "torch 2.14 (inductor image)": REPO / ".venv-inductor" / "bin" / "python"}
RUNS = (("eager", "eager"), ("inductor cold", "inductor"), ("inductor warm", "inductor"))


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SM_", "SAGEMAKER_", "PJRT_", "XLA_", "PT_XLA_", "OPENTC_", "TORCHINDUCTOR_",
                                "TRITON_", "ACCELERATE_", "TORCH_"))}
    return {**env, "TOKENIZERS_PARALLELISM": "false", **extra}


def stack_versions(python: Path) -> dict[str, str]:
    code = ("import json, torch, transformers; print(json.dumps({'torch': torch.__version__, "
            "'transformers': transformers.__version__}))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, timeout=300)
    return json.loads(done.stdout.strip().splitlines()[-1])


def gpt2(python: Path, runtime: str, config: str, seq: int, steps: int, cache: Path) -> dict:
    env = clean_env(BENCH_T0=repr(time.time()), PJRT_DEVICE="CPU")
    argv = [str(python), str(HERE / "bench_worker.py"), "--backend", runtime, "--config", config, "--seq", str(seq),
            "--batch", "8", "--steps", str(steps), *(["--cache-dir", str(cache)] if runtime == "inductor" else [])]
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3600)
    found = [line for line in proc.stdout.splitlines() if line.startswith("BENCH_RESULT ")]
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}")
    return json.loads(found[0].split(" ", 1)[1])


def trainer(python: Path, runtime: str, work: Path, out: Path, cache: Path, steps: int) -> dict:
    out.mkdir(parents=True)
    variables = {"USE_TORCH_XLA": "0"} | ({"ACCELERATE_DYNAMO_BACKEND": "inductor"} if runtime == "inductor" else {})
    worker = python.parent / "opentc-worker"
    argv = [str(python), "-c", PEAK, str(worker), "--backend", runtime, "--device", "cpu", "--compile-report-dir",
            str(out), *(["--compile-cache-dir", str(cache)] if runtime == "inductor" else []),
            str(SCRIPT), "--train_dir", str(work), "--output_dir", str(out / "model"), "--max_steps", str(steps),
            "--per_device_train_batch_size", "8", "--logging_steps", "10", "--save_strategy", "no",
            "--report_to", "none", "--optim", "adamw_torch", "--dataloader_drop_last", "true", "--block_size", "64",
            "--seed", "0", "--step_times_file", str(out / "times.json")]
    started = time.time()
    proc = subprocess.run(argv, env=clean_env(**variables), cwd=str(out), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"the Trainer on {python} ({runtime}) failed:\n{proc.stdout[-3000:]}")
    times = json.loads((out / "times.json").read_text())   # wall clock at the end of each optimizer step
    steady = [b - a for a, b in itertools.pairwise(times[5:])]
    peak = re.search(r"^PEAK_KB (\d+)$", proc.stdout, re.MULTILINE)
    row = {"median_step_s": statistics.median(steady), "first_step_done_s": times[0] - started,
           "peak_memory_mb": int(peak[1]) / 1024 if peak else None}
    report = out / "compile-report-rank0.json"
    if report.exists():
        data = json.loads(report.read_text())
        row.update(graphs_compiled=data["graphs_compiled"], compile_s=data["compile_seconds_total"],
                   cache_hits=data["persistent_cache"].get("hits", 0))
    return row


def measure(stacks: dict[str, Path], quick: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix="opentc-bench-torch-"))
    rows: list[dict] = []
    try:
        write_corpus(work)
        caches = {name: {kind: work / f"cache-{i}-{kind}" for kind in ("tiny", "small", "trainer")}
                  for i, name in enumerate(stacks)}
        jobs = [("GPT-2 tiny", "tiny", 64), ("GPT-2 small", "small", 128), ("Trainer (run_clm)", "trainer", 0)]
        for model, kind, seq in jobs:
            for run, runtime in RUNS:
                for name, python in stacks.items():   # interleaved: the same moment of the machine for both
                    print(f"  {model}, {run}, {name} ...", file=sys.stderr, flush=True)
                    cache = caches[name][kind]
                    if kind == "trainer":
                        result = trainer(python, runtime, work, work / f"{name}-{run}".replace(" ", "_"), cache,
                                         20 if quick else 40)
                    else:
                        result = gpt2(python, runtime, kind, seq, 8 if quick else 20, cache)
                    rows.append({"model": model, "stack": name, "run": run, **{
                        key: result.get(key) for key in ("median_step_s", "first_step_done_s", "peak_memory_mb",
                                                         "graphs_compiled", "compile_s", "cache_hits")}})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows}


def render(results: dict) -> str:
    rows = results["rows"]
    eager = {(r["model"], r["stack"]): r["median_step_s"] for r in rows if r["run"] == "eager"}
    lines = [f"Machine: {results['machine']}. Device: CPU (eager CPU and Inductor's C++ kernels).", ""]
    body = []
    for r in rows:
        compiled = r["run"] != "eager"
        body.append([r["model"], r["stack"], r["run"], r["graphs_compiled"] if compiled else "-",
                     r["cache_hits"] if compiled else "-", f"{r['compile_s']:.1f}" if compiled else "-",
                     f"{r['first_step_done_s']:.1f}", f"{r['median_step_s'] * 1000:.1f}",
                     f"{eager[(r['model'], r['stack'])] / r['median_step_s']:.2f}x", f"{r['peak_memory_mb']:.0f}"])
    lines.append(table(["model", "stack", "run", "graphs compiled", "from the cache", "compile (s)",
                        "first step done after (s)", "median step (ms)", "vs its eager", "peak memory (MB)"], body))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stack", action="append", default=[], metavar="NAME=PYTHON",
                   help="a stack to measure (repeatable); default: .venv and .venv-inductor")
    p.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    p.add_argument("--json", default=str(HERE / "results" / "torch-versions.json"))
    args = p.parse_args()
    stacks = dict(item.split("=", 1) for item in args.stack) if args.stack else DEFAULT_STACKS
    stacks = {name: Path(python) for name, python in stacks.items()}
    versions = {name: stack_versions(python) for name, python in stacks.items()}
    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
                   + "; ".join(f"{name}: torch {v['torch']}, transformers {v['transformers']}"
                               for name, v in versions.items()),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    started = time.time()
    results.update(measure(stacks, args.quick))
    results["seconds"] = round(time.time() - started, 1)
    publish(results, render(results), args.json)


if __name__ == "__main__":
    main()

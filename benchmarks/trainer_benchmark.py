"""A Hugging Face Trainer causal-LM job (tests/scripts/run_clm_tiny.py: run_clm's structure, a tiny GPT-2,
fixed-size blocks) on eager PyTorch, on XLA without and with the toolkit's library patches, and on Inductor with
a cold and then a warm cache, side by side in one run.

    .venv/bin/python benchmarks/trainer_benchmark.py [--steps N] [--json FILE]

Each run is a fresh `opentc-worker` process (the bootstrap `train` starts) with a compile report. Prints a
markdown table (graphs, executions and host reads per optimizer step, compile seconds, median step time, peak
memory) and writes JSON. Host reads and executions are counted between optimizer steps, by XLA's compile report.
The script is unchanged between runs: on Inductor, accelerate compiles the model (ACCELERATE_DYNAMO_BACKEND).
"""

import argparse
import datetime
import itertools
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiler_benchmark import publish, table

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
SCRIPT = REPO / "tests" / "scripts" / "run_clm_tiny.py"
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "wizards",
         "quietly", "hex", "jolly", "boxing", "frogs", "and", "every", "bright", "morning", "brings", "story")

RUNS = (  # name, folder, worker options, the workers' variables (as the toolkit sets them for the backend)
    ("eager (compiler off)", "eager", ["--backend", "eager"], {"USE_TORCH_XLA": "0"}),
    ("XLA, library patches off", "xla-off", ["--backend", "xla", "--library-patches", "false"], {"USE_TORCH_XLA": "1"}),
    ("XLA, library patches on (default)", "xla-on", ["--backend", "xla", "--library-patches", "true"],
     {"USE_TORCH_XLA": "1"}),
    ("Inductor, cold cache", "inductor-cold", ["--backend", "inductor"],
     {"USE_TORCH_XLA": "0", "ACCELERATE_DYNAMO_BACKEND": "inductor"}),
    ("Inductor, warm cache", "inductor-warm", ["--backend", "inductor"],
     {"USE_TORCH_XLA": "0", "ACCELERATE_DYNAMO_BACKEND": "inductor"}),
)
# Runs a command and says its peak resident memory: RUSAGE_CHILDREN of a process whose only child is that command.
PEAK = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
        "print('PEAK_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True); sys.exit(code)")


def write_corpus(folder: Path, lines: int = 1500) -> None:
    """corpus.txt: `lines` lines of 5 to 30 words, the same for every run (seeded)."""
    rng = random.Random(0)
    text = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(lines)]
    (folder / "corpus.txt").write_text("\n".join(text) + "\n")


def run(work: Path, name: str, folder: str, options: list[str], variables: dict, steps: int,
        logging_steps: int) -> dict:
    out = work / folder
    out.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SM_", "SAGEMAKER_", "PJRT_", "XLA_", "PT_XLA_", "OPENTC_", "ACCELERATE_DYNAMO_"))}
    # The tokenizer's thread pool, once used, keeps two cores busy enough to slow eager steps 60-fold here.
    env.update(PJRT_DEVICE="CPU", TOKENIZERS_PARALLELISM="false", **variables)
    # Only the Inductor runs share a cache (the warm run reads what the cold one wrote): XLA's runs start cold.
    cache = ["--compile-cache-dir", str(work / "inductor-cache")] if "inductor" in options else []
    argv = [sys.executable, "-c", PEAK, str(BIN / "opentc-worker"), "--device", "cpu", "--compile-report-dir",
            str(out), *cache, *options,
            str(SCRIPT), "--train_dir", str(work), "--output_dir", str(out / "model"), "--max_steps", str(steps),
            "--per_device_train_batch_size", "8", "--logging_steps", str(logging_steps), "--save_strategy", "no",
            "--report_to", "none", "--optim", "adamw_torch", "--dataloader_drop_last", "true",
            "--block_size", "64", "--seed", "0", "--step_times_file", str(out / "times.json")]
    started = time.time()
    proc = subprocess.run(argv, env=env, cwd=str(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stdout[-3000:]}")
    times = json.loads((out / "times.json").read_text())
    steady = [b - a for a, b in itertools.pairwise(times[5:])]   # after warm-up
    peak = re.search(r"^PEAK_KB (\d+)$", proc.stdout, re.MULTILINE)
    row = {"run": name, "steps": steps, "logging_steps": logging_steps, "seconds": round(time.time() - started, 1),
           "median_step_s": statistics.median(steady), "peak_memory_mb": int(peak[1]) / 1024 if peak else None}
    report_path = out / "compile-report-rank0.json"
    if report_path.exists():
        report = json.loads(report_path.read_text())
        row.update(graphs_compiled=report["graphs_compiled"], compile_s=report["compile_seconds_total"],
                   cache_hits=report["persistent_cache"].get("hits", 0))
        if "executions_per_step" in report:   # XLA's counters
            measured = max(report["optimizer_steps"] - 1, 1)
            executions = sum(int(k) * v for k, v in report["executions_per_step"].items())
            row.update(executions=report["executions"], executions_per_step=executions / measured,
                       host_reads=report["explicit_evaluations"],
                       steps_with_host_reads=report["steps_with_host_reads"], measured_steps=measured)
    return row


def render(results: dict) -> str:
    eager = results["runs"][0]["median_step_s"]
    rows = []
    for r in results["runs"]:
        compiled, xla = "graphs_compiled" in r, "executions_per_step" in r
        rows.append([r["run"], r.get("graphs_compiled", "-"), r.get("cache_hits", "-") if compiled else "-",
                     f"{r['executions_per_step']:.2f}" if xla else "-",
                     f"{r['steps_with_host_reads']} of {r['measured_steps']}" if xla else "-",
                     r.get("host_reads", "-"), f"{r['compile_s']:.1f}" if compiled else "-",
                     f"{r['median_step_s'] * 1000:.1f}", f"{eager / r['median_step_s']:.2f}x",
                     f"{r['peak_memory_mb']:.0f}" if r.get("peak_memory_mb") else "-"])
    first = results["runs"][0]
    return "\n".join([
        f"Machine: {results['machine']}. Device: CPU (eager CPU, XLA:CPU and Inductor's C++ kernels). "
        f"{first['steps']} optimizer steps, a log every {first['logging_steps']}, batch 8 x 64 tokens.", "",
        table(["run", "graphs compiled", "loaded from cache", "executions per optimizer step",
               "steps with a host read", "host reads in all", "compile (s)", "median step (ms)", "vs eager",
               "peak memory (MB)"], rows)])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--logging_steps", type=int, default=10)
    p.add_argument("--json", default=str(HERE / "results" / "trainer.json"))
    args = p.parse_args()
    import torch
    import torch_xla
    import transformers

    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
                   f"torch {torch.__version__}, torch-xla {torch_xla.__version__}, "
                   f"transformers {transformers.__version__}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="opentc-bench-trainer-") as folder:
        work = Path(folder)
        write_corpus(work)
        for name, folder, options, variables in RUNS:
            print(f"measuring {name} ...", file=sys.stderr, flush=True)
            results["runs"].append(run(work, name, folder, options, variables, args.steps, args.logging_steps))
    publish(results, render(results), args.json)


if __name__ == "__main__":
    main()

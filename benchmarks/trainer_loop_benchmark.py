"""The Trainer's step against a plain loop's, like for like, before and after the sync-free step and the head region:
the same GPT-2 (GPT-2's vocabulary of 50,257, dropout 0.1 as run_clm has it), batch, block size and optimizer,
trained by tests/scripts/run_clm_tiny.py (the Trainer, run_clm's structure) and by benchmarks/plain_clm_loop.py (a
loop a user writes), each in a fresh `opentc-run` launch on the CPU, side by side in one run.

    .venv/bin/python benchmarks/trainer_loop_benchmark.py [--models tiny,gpt2-12] [--steps N] [--json FILE]

Rows per model: eager; Inductor as this image compiled before (each block a region, library patches off: the
Trainer's host reads in), with the sync-free step (patches on), with the head region (the default now), and the
whole model. Each Inductor run compiles into a cache of its own (cold). Figures from each worker's record (the job
summary's): the median step once warm (the first 5 optimizer steps left out), host reads per step, compile seconds.
A CPU is a proxy: the host reads cost here only what the read itself costs (a GPU would wait for its queue), so the
GPU's figures are dev/gpu-kit's.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiler_benchmark import publish, table
from startup_benchmark import job_env
from trainer_benchmark import write_corpus

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
TRAINER = REPO / "tests" / "scripts" / "run_clm_tiny.py"
LOOP = HERE / "plain_clm_loop.py"
VOCABULARY = 50_257   # GPT-2's
MODELS = {"tiny": "n_layer=2,n_head=2,n_embd=64,n_inner=256",
          "gpt2-12": "n_layer=12,n_head=4,n_embd=256,n_inner=1024"}
BATCH, BLOCK, LOGGING_STEPS = 8, 64, 10

# (row, script, compiled, worker options beyond the backend's)
VARIANTS = (
    ("eager, library patches off", "trainer", False, ["--library-patches", "false"]),
    ("eager", "trainer", False, []),
    ("eager", "loop", False, []),
    ("Inductor, blocks only, patches off (before)", "trainer", True, ["--defaults-off", "head", "--library-patches",
                                                                       "false"]),
    ("Inductor, blocks only", "trainer", True, ["--defaults-off", "head"]),
    ("Inductor, blocks only", "loop", True, ["--defaults-off", "head"]),
    ("Inductor, blocks and head (default)", "trainer", True, []),
    ("Inductor, blocks and head (default)", "loop", True, []),
    ("Inductor, whole model", "trainer", True, ["--defaults-off", "regional"]),
    ("Inductor, whole model", "loop", True, ["--defaults-off", "regional"]),
)


def measure(work: Path, model: str, row: str, script: str, compiled: bool, options: list[str], steps: int) -> dict:
    out = work / f"{model}-{script}-{len(list(work.iterdir()))}"
    out.mkdir()
    overrides = f"{MODELS[model]},vocab_size={VOCABULARY}"
    common = ["--config_overrides", overrides, "--block_size", str(BLOCK), "--per_device_train_batch_size",
              str(BATCH), "--max_steps", str(steps), "--logging_steps", str(LOGGING_STEPS), "--seed", "0"]
    if script == "trainer":
        argv = [str(TRAINER), *common, "--train_dir", str(work), "--output_dir", str(out / "model"),
                "--save_strategy", "no", "--report_to", "none", "--optim", "adamw_torch",
                "--dataloader_drop_last", "true", "--disable_tqdm", "true"]
    else:
        argv = [str(LOOP), *common, *(["--compile"] if compiled else [])]
    env = job_env()   # none of the caller's SageMaker, compiler or torch variables; the tokenizer without threads
    launch = [str(BIN / "opentc-run"), "--standalone", "--nproc-per-node", "1", "--device", "cpu",
              "--backend", "inductor" if compiled else "eager", "--summary-dir", str(out),
              "--compile-report-dir", str(out), *options]
    if compiled:
        launch += ["--compile-cache-dir", str(out / "cache")]   # cold: a cache of its own
    started = time.time()
    proc = subprocess.run([*launch, *argv], env=env, cwd=str(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{model} {script} {row} failed:\n{proc.stdout[-4000:]}")
    record = json.loads((out / "worker-rank0.json").read_text())
    reads = record["host_reads"]
    return {"model": model, "row": row, "script": script, "options": options, "seconds": round(time.time() - started),
            "median_step_s": record["step_seconds"]["median"], "measured_steps": record["step_seconds"]
            ["measured_steps"], "host_reads_per_step": reads["per_step_median"],
            "every_step_at": [s["where"] for s in reads["per_step_sites"]],
            "compile_s": (record.get("compile") or {}).get("seconds"),
            "graphs": (record.get("compile") or {}).get("graphs_compiled")}


def render(results: dict) -> str:
    out = [f"Machine: {results['machine']}. Device: CPU (Inductor's C++ kernels), one worker through `opentc-run`. "
           f"GPT-2 with its vocabulary ({VOCABULARY:,}), dropout 0.1, batch {BATCH} x {BLOCK} tokens, AdamW; "
           f"{results['steps']} optimizer steps, the loss logged every {LOGGING_STEPS}, the median step after the "
           f"first 5.", ""]
    for model in results["models"]:
        runs = [r for r in results["runs"] if r["model"] == model]
        rows_seen = list(dict.fromkeys(r["row"] for r in runs))
        cells = []
        for row in rows_seen:
            trainer = next((r for r in runs if r["row"] == row and r["script"] == "trainer"), None)
            loop = next((r for r in runs if r["row"] == row and r["script"] == "loop"), None)

            def ms(r):
                return f"{r['median_step_s'] * 1000:.1f}" if r else "-"

            def reads(r):
                return f"{r['host_reads_per_step']:g}" if r else "-"

            def compiled(r):
                return f"{r['compile_s']:.1f}" if r and r["compile_s"] is not None else "-"

            ratio = f"{trainer['median_step_s'] / loop['median_step_s']:.2f}" if trainer and loop else "-"
            cells.append([row, ms(trainer), ms(loop), ratio, reads(trainer), reads(loop), compiled(trainer),
                          compiled(loop)])
        out += [f"**{model}** ({MODELS[model]})", "",
                table(["variant", "Trainer step (ms)", "loop step (ms)", "Trainer / loop", "Trainer host reads a step",
                       "loop host reads a step", "Trainer compile (s)", "loop compile (s)"], cells), ""]
    return "\n".join(out).rstrip()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="tiny,gpt2-12")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--json", default=str(HERE / "results" / "trainer-loop.json"))
    args = p.parse_args()
    import torch
    import transformers

    models = args.models.split(",")
    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
                   f"torch {torch.__version__}, transformers {transformers.__version__}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "steps": args.steps, "models": models, "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="opentc-bench-trainer-loop-") as folder:
        work = Path(folder)
        write_corpus(work, lines=3000)
        for model in models:
            for row, script, compiled, options in VARIANTS:
                print(f"measuring {model}: {script}, {row} ...", file=sys.stderr, flush=True)
                results["runs"].append(measure(work, model, row, script, compiled, options, args.steps))
    publish(results, render(results), args.json)


if __name__ == "__main__":
    main()

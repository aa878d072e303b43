"""Does regional compilation cost step time? A plain loop's GPT-2 trained eager, compiled whole (torch.compile as torch
has it) and compiled regionally (the Inductor backend's `regional` default), each measurement in a fresh process
(benchmarks/bench_worker.py), the three interleaved and repeated, on each torch.

    .venv/bin/python benchmarks/regional_steps_benchmark.py [--stacks 2.7,2.14] [--configs gpt2-12,tiny]
                                                             [--rounds 3] [--steps 30] [--json FILE]

Each row: the median over the rounds of each round's median step, its spread (lowest and highest round), the first
step's wait (the process's start to its end: imports, compile, the step), and the final loss. A 2-core machine's
step times drift by 10-30 % between jobs minutes apart; the rounds interleave the three settings so that a drift
touches all three, and the ratio is taken round by round.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from compiler_benchmark import publish, table

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STACKS = {"2.7": REPO / ".venv", "2.14": REPO / ".venv-inductor"}
SEQS = {"tiny": 64, "small": 128, "gpt2-12": 128, "t5-2": 64, "t5-6": 64, "llama-2": 64}
SETTINGS = {"eager": ["--backend", "eager"], "whole": ["--backend", "inductor"],
            "regional": ["--backend", "inductor", "--regional"]}


def run_one(stack: str, config: str, setting: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="opentc-bench-regional-") as cache:
        argv = [str(STACKS[stack] / "bin" / "python"), str(HERE / "bench_worker.py"), *SETTINGS[setting],
                "--config", config, "--seq", str(SEQS.get(config, 128)), "--batch", "8", "--warmup", "5",
                "--steps", str(steps)]
        if setting != "eager":
            argv += ["--cache-dir", cache]   # cold: each compiled run compiles, as the first job of a lineage
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TORCH_", "PJRT_"))}
        env.update(BENCH_T0=str(time.time()), TOKENIZERS_PARALLELISM="false")
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=3600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{stack} {config} {setting} failed (exit code {proc.returncode}):\n{proc.stdout[-3000:]}")
    result = json.loads(line.split(" ", 1)[1])
    words = " ".join(result.get("regional_words") or [])
    if setting == "regional" and "repeated blocks in place" not in words:   # else this row measures the whole model
        raise RuntimeError(f"{stack} {config}: regional compilation did not compile the blocks: {words or 'no word'}")
    return result


def measure(stacks: list[str], configs: list[str], rounds: int, steps: int) -> list[dict]:
    rows = []
    for config in configs:
        for stack in stacks:
            runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
            for r in range(rounds):
                order = list(SETTINGS) if r % 2 == 0 else list(reversed(SETTINGS))
                for setting in order:
                    print(f"{config}, torch {stack}, round {r + 1}: {setting} ...", file=sys.stderr, flush=True)
                    runs[setting].append(run_one(stack, config, setting, steps))
            for setting, results in runs.items():
                rows.append({"config": config, "stack": stack, "setting": setting, "runs": results})
    return rows


def render(results: dict) -> str:
    lines = [f"Machine: {results['machine']}. CPU, batch 8, {results['steps']} measured steps after 5 of warm-up, "
             f"{results['rounds']} rounds.", ""]
    body = []
    by_key = {(r["config"], r["stack"], r["setting"]): r for r in results["rows"]}
    for r in results["rows"]:
        steps = [run["median_step_s"] * 1000 for run in r["runs"]]
        whole = by_key[(r["config"], r["stack"], "whole")]["runs"]
        ratio = (statistics.median(run["median_step_s"] / w["median_step_s"]
                                   for run, w in zip(r["runs"], whole, strict=True)))
        body.append([r["config"], r["stack"], r["setting"], f"{statistics.median(steps):.1f}",
                     f"{min(steps):.1f}-{max(steps):.1f}", f"{ratio:.2f}x",
                     f"{statistics.median(run['first_step_done_s'] for run in r['runs']):.1f}",
                     f"{r['runs'][0]['final_loss']:.4f}"])
    lines.append(table(["model", "torch", "compiled", "median step (ms)", "rounds' range (ms)",
                        "step / whole's (round by round)", "first step done (s)", "final loss"], body))
    return "\n".join(lines)


def run_benchmark(description: str, configs: str, rounds: int, steps: int, json_name: str,
                  render_results: Callable[[dict], str]) -> None:
    """The command line both regional benchmarks share: their defaults differ, the measuring and publishing do not."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--stacks", default="2.7,2.14")
    p.add_argument("--configs", default=configs)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--json", default=str(HERE / "results" / json_name))
    args = p.parse_args()
    stacks = [s for s in args.stacks.split(",") if s and (STACKS.get(s, Path("/nonexistent")) / "bin").exists()]
    if not stacks:
        p.error("no stack to measure (dev/setup makes .venv, dev/setup inductor .venv-inductor)")
    import platform

    versions = [subprocess.run([str(STACKS[s] / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                               stdout=subprocess.PIPE, text=True, check=True).stdout.strip() for s in stacks]
    started = time.time()
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch " + ", ".join(versions),
               "command": " ".join([Path(sys.executable).name, *sys.argv]), "steps": args.steps,
               "rounds": args.rounds}
    results["rows"] = measure(stacks, [c for c in args.configs.split(",") if c], args.rounds, args.steps)
    results["seconds"] = round(time.time() - started, 1)
    publish(results, render_results(results), args.json)


def main() -> None:
    run_benchmark(__doc__.splitlines()[0], "gpt2-12,tiny", 3, 30, "regional_steps.json", render)


if __name__ == "__main__":
    main()

"""Compile time of blocks of a few kinds: a T5, whose stacks' first block carries the position bias table, compiled
whole (what the `regional` default did with it before blocks of a few kinds counted as repeated) and regionally (one
graph per kind of block), beside a Llama of the same width, whose blocks are all alike, as the reference. Each
measurement is a fresh process on a cold cache (benchmarks/bench_worker.py, a plain loop), eager, whole and regional
interleaved and repeated, on each torch.

    .venv/bin/python benchmarks/regional_kinds_benchmark.py [--stacks 2.7,2.14] [--configs t5-2,t5-6,llama-2]
                                                             [--rounds 2] [--steps 10] [--json FILE]

Each row: the medians over the rounds of the compile time (Dynamo's compile callbacks: tracing, AOTAutograd and
Inductor, forward and backward), the graphs Inductor compiled, the first step's wait (the process's start to its
end) and that wait beyond eager's, and the median step; the kinds of block regional compilation found (its log),
and the final loss.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from compiler_benchmark import publish, table
from regional_steps_benchmark import SETTINGS, STACKS, run_one

HERE = Path(__file__).resolve().parent
NAMES = {"t5-2": "T5, 2+2 layers (64 wide)", "t5-6": "T5, 6+6 layers (64 wide)",
         "llama-2": "Llama, 2 layers (64 wide)"}
# Before blocks of a few kinds counted, the `regional` default compiled a T5 whole: its blocks differ in shape.
BEFORE = {"t5-2": "whole", "t5-6": "whole", "llama-2": "regional"}


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
            rows += [{"config": config, "stack": stack, "setting": s, "runs": results} for s, results in runs.items()]
    return rows


def kinds(run: dict) -> str:
    found = re.search(r"\((\d+) kinds?\)", " ".join(run.get("regional_words") or []))
    return found.group(1) if found else "-"


def median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def render(results: dict) -> str:
    seqs = ", ".join(sorted({f"{r['runs'][0]['seq']}" for r in results["rows"]}))
    lines = [f"Machine: {results['machine']}. CPU, batch 8, sequence {seqs}, {results['steps']} measured steps after "
             f"5 of warm-up, {results['rounds']} round(s), each run a fresh process on a cold cache.", ""]
    by_key = {(r["config"], r["stack"], r["setting"]): r["runs"] for r in results["rows"]}
    body = []
    for r in results["rows"]:
        runs, compiled = r["runs"], r["setting"] != "eager"
        eager_wait = median(by_key[(r["config"], r["stack"], "eager")], "first_step_done_s")
        wait = median(runs, "first_step_done_s")
        seconds = [run.get("compile_s", 0.0) for run in runs]
        body.append([NAMES.get(r["config"], r["config"]), r["stack"], r["setting"], kinds(runs[0]),
                     f"{median(runs, 'compile_s'):.1f}" if compiled else "-",
                     f"{min(seconds):.1f}-{max(seconds):.1f}" if compiled else "-",
                     f"{median(runs, 'graphs_compiled'):.0f}" if compiled else "-",
                     f"{wait:.1f}", f"+{wait - eager_wait:.1f}" if compiled else "-", f"{runs[0]['final_loss']:.4f}"])
    lines.append(table(["model", "torch", "compiled", "kinds of block", "compile (s)", "rounds' range (s)",
                        "graphs compiled", "first step done (s)", "extra wait vs eager (s)", "final loss"], body))
    summary = []
    for config, stack in dict.fromkeys((r["config"], r["stack"]) for r in results["rows"]):
        whole = median(by_key[(config, stack, "whole")], "compile_s")
        regional = median(by_key[(config, stack, "regional")], "compile_s")
        before = whole if BEFORE[config] == "whole" else regional
        summary.append([NAMES.get(config, config), stack, f"{whole:.1f}", f"{regional:.1f}", BEFORE[config],
                        f"{regional / before:.2f}x", f"{regional / whole:.2f}x"])
    lines += ["", table(["model", "torch", "compile (s): whole", "compile (s): regional",
                         "what the default did before", "now / before", "regional / whole"], summary)]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stacks", default="2.7,2.14")
    p.add_argument("--configs", default="t5-2,t5-6,llama-2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--json", default=str(HERE / "results" / "regional_kinds.json"))
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
    publish(results, render(results), args.json)


if __name__ == "__main__":
    main()

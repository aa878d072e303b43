"""The warm extra wait, in medians: how much later than eager's a compiled job whose cache is warm reaches its first
optimizer step (issue 54's goal: at most 1 s), with the Inductor backend's defaults on.

    .venv/bin/python benchmarks/warm_wait_benchmark.py [--stacks 2.14,2.7] [--models trainer,gpt2-12] [--rounds 3]
                                                       [--steps 20] [--json FILE]

One run of the startup benchmark moves by seconds on a 2-core machine (eager's own first step took 8.5-13.1 s in four
runs of one day), more than the goal itself. So here, for each model and torch, one cold job fills a cache, then
ROUNDS rounds each run an eager job and a warm job, one after the other (the order alternating from round to round),
so that the machine's drift falls on both; the table gives the medians and each round's difference. Every job is a
whole `opentc-train` job, as in benchmarks/startup_benchmark.py (whose job folders, models and stacks this uses).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
from pathlib import Path

from compiler_benchmark import publish, table
from startup_benchmark import MODELS, STACKS, machine, run_job

HERE = Path(__file__).resolve().parent
GOAL_S = 1.0
COMPILED = {"sagemaker_training_compiler_backend": "inductor"}
EAGER = {"sagemaker_training_compiler_enabled": False}


def measure(stacks: list[str], models: list[str], rounds: int, steps: int, work: Path) -> list[dict]:
    rows = []
    for model in models:
        for stack in stacks:
            title = MODELS[model][0]
            cache = work / f"cache-{model}-{stack}"
            compiled = {**COMPILED, "sagemaker_training_compiler_cache_dir": str(cache)}
            print(f"{title}, torch {stack}: cold ...", file=sys.stderr, flush=True)
            cold = run_job(stack, work / "job", model, steps, compiled)
            pairs = []
            for n in range(rounds):
                order = [("eager", EAGER), ("warm", compiled)]
                measured = {}
                for name, hyperparameters in order if n % 2 == 0 else reversed(order):
                    print(f"{title}, torch {stack}: round {n + 1}, {name} ...", file=sys.stderr, flush=True)
                    measured[name] = run_job(stack, work / "job", model, steps, hyperparameters)
                pairs.append(measured)
            rows.append({"model": model, "stack": stack, "cold": cold, "rounds": pairs})
    return rows


def _range(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def render(results: dict) -> str:
    lines = [f"Machine: {results['machine']}. CPU, {results['steps']} optimizer steps per job, batch 8; medians of "
             f"{results['rounds']} rounds (lowest-highest).", ""]
    body = []
    for row in results["rows"]:
        eager = [p["eager"]["first_step_s"] for p in row["rounds"]]
        warm = [p["warm"]["first_step_s"] for p in row["rounds"]]
        extra = [w - e for w, e in zip(warm, eager, strict=True)]
        compile_s = [p["warm"]["compile_s"] for p in row["rounds"] if p["warm"]["compile_s"] is not None]
        hits = {p["warm"]["graphs_compiled"] for p in row["rounds"]}
        median = statistics.median(extra)
        body.append([MODELS[row["model"]][0], row["stack"], _range(eager), _range(warm),
                     " / ".join(f"{x:+.1f}" for x in extra), f"{median:+.1f}",
                     _range(compile_s) if compile_s else "-", ", ".join(str(h) for h in sorted(hits, key=str)),
                     "yes" if median <= GOAL_S else "no"])
    lines.append(table(["model", "torch", "eager first step (s)", "warm first step (s)",
                        "extra wait, round by round (s)", "extra wait, median (s)", "warm compile (s)",
                        "graphs compiled (warm)", f"median at most {GOAL_S:g} s"], body))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stacks", default="2.14,2.7", help="comma-separated: 2.7 (.venv), 2.14 (.venv-inductor)")
    p.add_argument("--models", default="trainer,gpt2-12", help="comma-separated: " + ", ".join(MODELS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--json", default=str(HERE / "results" / "warm-wait.json"))
    args = p.parse_args()
    stacks = [s for s in args.stacks.split(",") if s]
    missing = [s for s in stacks if not (STACKS[s] / "bin" / "opentc-train").exists()]
    for stack in missing:
        print(f"torch {stack}: {STACKS[stack]} is not there (dev/setup inductor makes .venv-inductor): left out",
              file=sys.stderr)
    stacks = [s for s in stacks if s not in missing]
    with tempfile.TemporaryDirectory(prefix="opentc-warm-wait-") as work:
        rows = measure(stacks, [m for m in args.models.split(",") if m], args.rounds, args.steps, Path(work))
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(stacks),
               "command": " ".join([".venv/bin/python", "benchmarks/warm_wait_benchmark.py", *sys.argv[1:]]),
               "steps": args.steps, "rounds": args.rounds, "rows": rows}
    publish(results, render(results), args.json)


if __name__ == "__main__":
    main()

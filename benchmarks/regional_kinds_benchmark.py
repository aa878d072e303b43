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

import re
import statistics

from compiler_benchmark import table
from regional_steps_benchmark import run_benchmark

NAMES = {"t5-2": "T5, 2+2 layers (64 wide)", "t5-6": "T5, 6+6 layers (64 wide)",
         "llama-2": "Llama, 2 layers (64 wide)"}
# Before blocks of a few kinds counted, the `regional` default compiled a T5 whole: its blocks differ in shape.
BEFORE = {"t5-2": "whole", "t5-6": "whole", "llama-2": "regional"}


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
    run_benchmark(__doc__.splitlines()[0], "t5-2,t5-6,llama-2", 2, 10, "regional_kinds.json", render)


if __name__ == "__main__":
    main()

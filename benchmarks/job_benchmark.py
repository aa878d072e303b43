"""Whole jobs through `train`, side by side in one run: what a user waits for, measured from each job's own summary.

    .venv/bin/python benchmarks/job_benchmark.py cache [--repeats 3] [--json FILE]

Suites:
  cache   what the Inductor cache's working copy costs a warm job. The sample job on Inductor, each way cold once
          and then warm `--repeats` times, interleaved: the default (the workers compile in a copy of the published
          cache, checked against its manifest before the job and published back after a success) against the cache
          used in place (TORCHINDUCTOR_CACHE_DIR set by the user: the workers read and write the folder itself, as
          every job did before the working copy existed).

Every job is a fresh `opentc-train` process on a copy of sample/job. Prints a markdown table and writes JSON.
"""

from __future__ import annotations

import argparse
import datetime
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
SAMPLE = REPO / "sample" / "job"
_CACHE_LINE = re.compile(r"compilation cache \S+: [^\n]*?"
                         r"(?:(?P<files>[0-9]+) files \((?P<size>[0-9.]+ [KMG]?B)\)[^\n]*)?\((?P<s>[0-9.]+) s\)")
_PUBLISHED = re.compile(r"compilation cache: published [^\n]*\((?P<s>[0-9.]+) s\)")


def job_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SM_", "SAGEMAKER_", "PJRT_", "XLA_", "PT_XLA_", "OPENTC_", "TORCHINDUCTOR_",
                                "TRITON_", "ACCELERATE_", "TORCH_"))}
    return {**env, **extra}


def run_job(work: Path, name: str, hyperparameters: dict[str, object], env: dict[str, str]) -> dict:
    """One job on a fresh copy of the sample; its summary's figures and the cache's own timings from its log."""
    job = work / name
    shutil.rmtree(job, ignore_errors=True)
    shutil.copytree(SAMPLE, job)
    path = job / "input" / "config" / "hyperparameters.json"
    values = json.loads(path.read_text())
    values.update({key: json.dumps(value) for key, value in hyperparameters.items()})
    path.write_text(json.dumps(values))
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "opentc-train"), str(job)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=1800)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed (exit code {proc.returncode}):\n{proc.stdout[-3000:]}")
    summary = json.loads((job / "output" / "data" / "job-summary.json").read_text())
    opened, published = _CACHE_LINE.search(proc.stdout), _PUBLISHED.search(proc.stdout)
    compile_ = summary.get("compile") or {}
    return {"job": name, "wall_s": wall, "first_step_s": summary.get("first_step_seconds"),
            "median_step_s": (summary.get("step_seconds") or {}).get("median"),
            "compile_s": compile_.get("seconds"), "graphs_compiled": compile_.get("graphs_compiled"),
            "cache_hits": compile_.get("cache_hits"),
            "cache_open_s": float(opened["s"]) if opened else None,
            "cache_publish_s": float(published["s"]) if published else None,
            "cache_files": int(opened["files"]) if opened and opened["files"] else None,
            "cache_size": opened["size"] if opened else None}


def cache_suite(work: Path, repeats: int) -> list[dict]:
    inductor = {"sagemaker_training_compiler_backend": "inductor"}
    copy_root, in_place = work / "published", work / "in-place"
    ways = {
        "working copy (default)": (dict(inductor, sagemaker_training_compiler_cache_dir=str(copy_root)), job_env()),
        "in place (TORCHINDUCTOR_CACHE_DIR)": (inductor, job_env(TORCHINDUCTOR_CACHE_DIR=str(in_place))),
    }
    rows = []
    for run in ["cold"] + [f"warm {i + 1}" for i in range(repeats)]:
        for way, (hyperparameters, env) in ways.items():
            print(f"  {way}, {run} ...", file=sys.stderr, flush=True)
            rows.append({"way": way, "run": run, **run_job(work, "job", hyperparameters, env)})
    return rows


def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def _s(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _files(row: dict) -> str:
    return "-" if row.get("cache_files") is None else f"{row['cache_files']} ({row['cache_size']})"


def render(results: dict) -> str:
    rows = results["cache"]
    lines = [f"Machine: {results['machine']}. Sample job (tiny GPT-2, 30 steps) on Inductor, CPU.", "",
             "| way | run | wall (s) | first step after (s) | compile (s) | graphs compiled | from the cache | "
             "cache copied in (s) | cache published (s) | cache files (size) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['way']} | {r['run']} | {_s(r['wall_s'])} | {_s(r['first_step_s'])} | {_s(r['compile_s'])} "
                     f"| {r['graphs_compiled']} | {r['cache_hits']} | {_s(r['cache_open_s'], 2)} "
                     f"| {_s(r['cache_publish_s'], 2)} | {_files(r)} |")
    lines += ["", "| way | warm jobs | median wall (s) | median first step after (s) | median compile (s) |",
              "|---|---|---|---|---|"]
    for way in dict.fromkeys(r["way"] for r in rows):
        warm = [r for r in rows if r["way"] == way and r["run"].startswith("warm")]
        lines.append(f"| {way} | {len(warm)} | {_s(_median(warm, 'wall_s'))} | {_s(_median(warm, 'first_step_s'))} "
                     f"| {_s(_median(warm, 'compile_s'))} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite", choices=["cache"])
    p.add_argument("--repeats", type=int, default=3, help="warm jobs per way")
    p.add_argument("--json", default=str(HERE / "results" / "jobs-cache.json"))
    args = p.parse_args()
    import torch

    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
                          f"torch {torch.__version__}",
               "command": " ".join([Path(sys.executable).name, *sys.argv])}
    work = Path(tempfile.mkdtemp(prefix="opentc-bench-jobs-"))
    started = time.time()
    try:
        results["cache"] = cache_suite(work, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["seconds"] = round(time.time() - started, 1)
    text = render(results)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({**results, "table": text}, indent=2))
        print(f"\nwrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()

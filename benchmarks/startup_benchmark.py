"""How long a compiled job waits for its first optimizer step, with the Inductor backend's compile-time defaults
off (today's settings), each on alone, and all on (the default), against eager, side by side in one run.

    .venv/bin/python benchmarks/startup_benchmark.py [--stacks 2.7,2.14] [--settings all|regional|short] [--steps 20]
                                                     [--models tiny,small,gpt2-12,trainer-tiny,trainer] [--json FILE]

Every job is a whole `opentc-train` job of its own (a fresh process tree, as SageMaker starts it) on a job folder
built from sample/job: the sample's plain PyTorch loop (its own torch.compile(model)) on the tiny GPT-2, a small one
and a 12-layer one, and the Hugging Face Trainer (tests/scripts/run_clm_tiny.py, run_clm's
structure) on the tiny and the 12-layer one. For each model and torch: one eager job, then for each setting a cold
job on an empty compilation cache and a warm job on the cache the cold one published. "first step after" is the
time from the start of `train` to the end of the first optimizer step (the job summary's first_step_seconds);
"extra wait" is that minus eager's. Stacks: 2.7 is .venv (the xla image's torch), 2.14 is .venv-inductor (the inductor
image's); a stack whose virtual environment is missing is left out, and said so (dev/setup inductor makes it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiler_benchmark import publish, table

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLE = REPO / "sample" / "job"
TRAINER_SCRIPT = REPO / "tests" / "scripts" / "run_clm_tiny.py"
STACKS = {"2.7": REPO / ".venv", "2.14": REPO / ".venv-inductor"}
DEFAULTS_OFF = "sagemaker_training_compiler_defaults_off"
NAMES = ("regional", "head", "vec_isa", "job_id", "logging", "warm_start", "progress")
DROPOUT_OFF = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "use_cache": False}
MODELS = {   # name: (title, GPT-2 config, block size, whether the Trainer runs it)
    "tiny": ("GPT-2 tiny (2 layers, 64 wide), plain loop",
             {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_inner": 256}, 64, False),
    "small": ("GPT-2 small (4 layers, 256 wide), plain loop",
              {"n_layer": 4, "n_head": 4, "n_embd": 256, "n_inner": 1024}, 128, False),
    "gpt2-12": ("GPT-2 12 layers (256 wide), plain loop",
                {"n_layer": 12, "n_head": 4, "n_embd": 256, "n_inner": 1024}, 128, False),
    "trainer-tiny": ("GPT-2 tiny (2 layers, 64 wide), Trainer (run_clm)",
                     {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_inner": 256}, 64, True),
    "trainer": ("GPT-2 12 layers (256 wide), Trainer (run_clm)",
                {"n_layer": 12, "n_head": 4, "n_embd": 256, "n_inner": 1024}, 128, True),
}
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "wizards",
         "quietly", "hex", "jolly", "boxing", "frogs", "and", "every", "bright", "morning", "brings", "story")


def settings(which: str) -> list[tuple[str, str]]:
    """(name, the defaults left off): every default off, each alone (all) or regional compilation alone (regional),
    and all of them. Every default applies to the plain loop and the Trainer alike."""
    alone = {"all": NAMES, "regional": ("regional",), "short": ()}[which]
    rows = [("today (every default off)", "all")]
    rows += [(f"+ {name} only", ",".join(n for n in NAMES if n != name)) for name in alone]
    rows.append(("all defaults (new)", ""))
    return rows


def job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SM_", "SAGEMAKER_", "PJRT_", "XLA_", "PT_XLA_", "OPENTC_", "TORCHINDUCTOR_",
                                "TRITON_", "ACCELERATE_", "TORCH_"))}
    return {**env, "TOKENIZERS_PARALLELISM": "false"}   # the tokenizer's threads slow eager steps 60-fold here


def build_job(folder: Path, model: str, steps: int, hyperparameters: dict[str, object]) -> None:
    """The sample job folder, with a corpus big enough for every block size and the model's own config."""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(SAMPLE, folder)
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(1500)]
    data = folder / "input" / "data" / "train"
    for old in data.glob("*.txt"):
        old.unlink()
    (data / "corpus.txt").write_text("\n".join(lines) + "\n")
    _, config, block, trainer = MODELS[model]
    path = folder / "input" / "config" / "hyperparameters.json"
    values = json.loads(path.read_text())
    if trainer:
        shutil.copy(TRAINER_SCRIPT, folder / "code" / TRAINER_SCRIPT.name)
        for key in [k for k in values if not k.startswith("sagemaker_")]:
            del values[key]
        overrides = ",".join(f"{k}={v}" for k, v in {**config, **DROPOUT_OFF}.items())
        script = {"sagemaker_program": TRAINER_SCRIPT.name, "output_dir": str(folder / "model"), "max_steps": steps,
                  "per_device_train_batch_size": 8, "learning_rate": 0.003, "logging_steps": 10,
                  "save_strategy": "no", "report_to": "none", "optim": "adamw_torch", "dataloader_drop_last": True,
                  "block_size": block, "seed": 0, "config_overrides": overrides}
    else:
        (folder / "code" / "model.json").write_text(json.dumps({**config, **DROPOUT_OFF}))
        script = {"model_config": str(folder / "code" / "model.json"), "max_steps": steps, "batch_size": 8,
                  "block_size": block, "log_every": 10}
    values.update({key: json.dumps(value) for key, value in {**script, **hyperparameters}.items()})
    path.write_text(json.dumps(values))


def run_job(stack: str, folder: Path, model: str, steps: int, hyperparameters: dict[str, object]) -> dict:
    build_job(folder, model, steps, hyperparameters)
    started = time.monotonic()
    proc = subprocess.run([str(STACKS[stack] / "bin" / "opentc-train"), str(folder)], env=job_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3600)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{folder.name} failed (exit code {proc.returncode}):\n{proc.stdout[-3000:]}")
    summary = json.loads((folder / "output" / "data" / "job-summary.json").read_text())
    report_path = folder / "output" / "data" / "compiler" / "compile-report-rank0.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    compiled = summary.get("compile") or {}
    return {"wall_s": wall, "first_step_s": summary.get("first_step_seconds"),
            "median_step_s": (summary.get("step_seconds") or {}).get("median"),
            "compile_s": compiled.get("seconds"), "graphs_compiled": compiled.get("graphs_compiled"),
            "cache_hits": compiled.get("cache_hits"), "graphs_captured": report.get("graphs_captured"),
            "loss": summary.get("loss"), "defaults": report.get("compile_time_defaults")}


def measure(stacks: list[str], models: list[str], which: str, steps: int, work: Path) -> list[dict]:
    rows = []
    for model in models:
        for stack in stacks:
            title = MODELS[model][0]
            print(f"{title}, torch {stack}: eager ...", file=sys.stderr, flush=True)
            eager = run_job(stack, work / "job", model, steps, {"sagemaker_training_compiler_enabled": False})
            rows.append({"model": model, "stack": stack, "setting": "eager", "run": "-", **eager})
            for name, off in settings(which):
                cache = work / f"cache-{model}-{stack}-{len(rows)}"
                hyperparameters = {"sagemaker_training_compiler_backend": "inductor", DEFAULTS_OFF: off,
                                   "sagemaker_training_compiler_cache_dir": str(cache)}
                for run in ("cold", "warm"):
                    print(f"{title}, torch {stack}: {name}, {run} ...", file=sys.stderr, flush=True)
                    measured = run_job(stack, work / "job", model, steps, hyperparameters)
                    rows.append({"model": model, "stack": stack, "setting": name, "run": run, **measured,
                                 "extra_wait_s": measured["first_step_s"] - eager["first_step_s"]})
                shutil.rmtree(cache, ignore_errors=True)
    return rows


def _s(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _step_ms(row: dict) -> str:
    return _s(None if row["median_step_s"] is None else row["median_step_s"] * 1000)


def _last_loss(row: dict) -> str:
    points = (row.get("loss") or {}).get("points") or []
    return f"{points[-1]['loss']:.4f}" if points else "-"


def render(results: dict) -> str:
    rows = results["rows"]
    lines = [f"Machine: {results['machine']}. CPU (eager CPU against Inductor's C++ kernels), "
             f"{results['steps']} optimizer steps per job, batch 8.", ""]
    body = []
    for r in rows:
        extra = "-" if r["setting"] == "eager" else f"{r['extra_wait_s']:+.1f}"
        body.append([MODELS[r["model"]][0], r["stack"], r["setting"], r["run"], _s(r["wall_s"]),
                     _s(r["first_step_s"]), extra, _s(r["compile_s"]), r.get("graphs_captured", "-") or "-",
                     "-" if r["graphs_compiled"] is None else r["graphs_compiled"],
                     "-" if r["cache_hits"] is None else r["cache_hits"],
                     _s(None if r["median_step_s"] is None else r["median_step_s"] * 1000)])
    lines.append(table(["model", "torch", "setting", "run", "job wall (s)", "first step after (s)",
                        "extra wait vs eager (s)", "compile (s)", "graphs captured", "graphs compiled",
                        "from the cache", "median step (ms)"], body))
    lines += ["", "Today against the new defaults (extra wait for the first optimizer step, beyond eager's):", ""]
    summary = []
    found = {(r["model"], r["stack"], r["setting"], r["run"]): r for r in rows}
    for model, stack in dict.fromkeys((r["model"], r["stack"]) for r in rows):
        eager = found.get((model, stack, "eager", "-"))
        today_cold = found.get((model, stack, "today (every default off)", "cold"))
        today_warm = found.get((model, stack, "today (every default off)", "warm"))
        new_cold = found.get((model, stack, "all defaults (new)", "cold"))
        new_warm = found.get((model, stack, "all defaults (new)", "warm"))
        if not (eager and today_cold and new_cold and today_warm and new_warm):
            continue
        summary.append([MODELS[model][0], stack, _s(eager["first_step_s"]),
                        f"{today_cold['extra_wait_s']:+.1f}", f"{new_cold['extra_wait_s']:+.1f}",
                        f"{new_cold['extra_wait_s'] / today_cold['extra_wait_s']:.2f}x",
                        f"{today_warm['extra_wait_s']:+.1f}", f"{new_warm['extra_wait_s']:+.1f}",
                        " / ".join(_step_ms(r) for r in (eager, today_cold, today_warm, new_cold, new_warm)),
                        " / ".join(_last_loss(r) for r in (eager, today_cold, new_cold))])
    lines.append(table(["model", "torch", "eager first step (s)", "cold: today", "cold: new defaults",
                        "cold: new / today", "warm: today", "warm: new defaults",
                        "median step (ms): eager / today cold, warm / new cold, warm",
                        "last loss: eager / today / new"], summary))
    return "\n".join(lines)


def machine(stacks: list[str]) -> str:
    versions = []
    for stack in stacks:
        out = subprocess.run([str(STACKS[stack] / "bin" / "python"), "-c",
                              "import torch, transformers; print(torch.__version__, transformers.__version__)"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.split()
        versions.append(f"torch {out[0]} (transformers {out[1]})")
    return (f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
            + "; ".join(versions))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stacks", default="2.7,2.14", help="comma-separated: 2.7 (.venv), 2.14 (.venv-inductor)")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    p.add_argument("--settings", choices=["all", "regional", "short"], default="all",
                   help="all: today's, each default alone, and all of them; regional: today's, regional compilation "
                        "alone, and all of them; short: today's and all of them")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--json", default=str(HERE / "results" / "startup.json"))
    args = p.parse_args()
    stacks = [s for s in args.stacks.split(",") if s]
    missing = [s for s in stacks if not (STACKS.get(s, Path("/nonexistent")) / "bin" / "opentc-train").exists()]
    if missing:
        print(f"left out: torch {', '.join(missing)} (no {', '.join(str(STACKS.get(s)) for s in missing)}; "
              f"dev/setup inductor makes .venv-inductor)", file=sys.stderr)
        stacks = [s for s in stacks if s not in missing]
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not stacks:
        p.error(f"unknown model(s) {unknown}" if unknown else "no stack to measure")
    work = Path(tempfile.mkdtemp(prefix="opentc-bench-startup-"))
    started = time.time()
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(stacks),
               "command": " ".join([Path(sys.executable).name, *sys.argv]), "steps": args.steps}
    try:
        results["rows"] = measure(stacks, models, args.settings, args.steps, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["seconds"] = round(time.time() - started, 1)
    publish(results, render(results), args.json)


if __name__ == "__main__":
    main()

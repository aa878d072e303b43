"""What each compiler buys and costs, measured side by side with eager in one run on one machine.

    .venv/bin/python benchmarks/compiler_benchmark.py [--quick] [--backends eager,xla,inductor] [--json FILE]

1. steady-state step time, tokens/s, compile seconds and peak memory: eager PyTorch, PyTorch/XLA and
   torch.compile (TorchInductor), same model and data, on the tiny and a small GPT-2 config, fixed sequence length;
2. graphs compiled per job with static shapes vs a different sequence length every step;
3. cold vs warm persistent cache: compile time and time to the first finished step of two identical jobs;
4. launcher overhead: time from `train` to the user script's first line, against `python script.py`.

With a GPU it measures CUDA: eager, XLA:CUDA and Inductor (Triton); without one, CPU: eager, XLA:CPU and Inductor
(C++), and says so. XLA is left out where torch_xla is not installed (a GPU machine with a newer torch). Every
measurement runs in a fresh process (bench_worker.py). Prints markdown tables and writes JSON.
"""

import argparse
import datetime
import json
import os
import platform
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


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001  (no torch, or a CUDA build without a driver: no GPU to measure)
        return 0


def base_env(device: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SM_", "SAGEMAKER_", "PJRT_", "XLA_", "PT_XLA_", "OPENTC_"))}
    env["PJRT_DEVICE"] = device
    return env


def measure(device: str, *args: str) -> dict:
    env = {**base_env(device), "BENCH_T0": repr(time.time())}
    proc = subprocess.run([sys.executable, str(HERE / "bench_worker.py"), *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            return json.loads(line[len("BENCH_RESULT "):])
    raise RuntimeError(f"bench_worker {' '.join(args)} failed:\n{proc.stdout[-3000:]}")


COMPILERS = ("xla", "inductor")


def throughput(device: str, quick: bool, backends: list[str]) -> list[dict]:
    rows = []
    for config, seq, batch in (("tiny", 64, 8), ("small", 128, 8)):
        steps = "8" if quick else "20"
        for backend in backends:
            rows.append(measure(device, "--backend", backend, "--config", config, "--seq", str(seq),
                                "--batch", str(batch), "--steps", steps))
    return rows


def graphs(device: str, quick: bool, backends: list[str]) -> list[dict]:
    steps = "8" if quick else "16"
    return [measure(device, "--backend", backend, "--config", "tiny", "--steps", steps, *extra)
            for backend in backends if backend in COMPILERS for extra in ((), ("--dynamic",))]


def cache(device: str, quick: bool, backends: list[str]) -> list[dict]:
    rows = []
    for backend in (r for r in backends if r in COMPILERS):
        folder = tempfile.mkdtemp(prefix="opentc-bench-cache-")
        try:
            for job in ("cold", "warm"):
                row = measure(device, "--backend", backend, "--config", "small", "--seq", "128", "--steps",
                              "3" if quick else "5", "--cache-dir", folder)
                rows.append({**row, "job": job})
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


FIRST_LINE = ("import time; STARTED = time.time()\nimport os\n"
              "open(os.environ['BENCH_T_FILE'], 'w').write(repr(STARTED))\n")


def launcher_overhead(device: str, repeats: int, backends: list[str]) -> list[dict]:
    """Seconds from starting the command to the script's first line (median of `repeats`)."""
    work = Path(tempfile.mkdtemp(prefix="opentc-bench-launch-"))
    try:
        marker = work / "t"
        script = work / "first_line.py"
        script.write_text(FIRST_LINE)

        def timed(argv, env) -> float:
            samples = []
            for _ in range(repeats):
                marker.unlink(missing_ok=True)
                start = time.time()
                subprocess.run(argv, env={**env, "BENCH_T_FILE": str(marker)}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=True, timeout=600)
                samples.append(float(marker.read_text()) - start)
            return statistics.median(samples)

        rows = [{"command": "python first_line.py", "seconds": timed([sys.executable, str(script)], base_env(device))}]
        if "xla" in backends:
            # What the XLA bootstrap imports before the script: a script on XLA imports it anyway.
            rows.append({"command": "python -c 'import torch, torch_xla' + first_line.py",
                         "seconds": timed([sys.executable, "-c", "import torch, torch_xla, runpy, sys; "
                                           "runpy.run_path(sys.argv[1], run_name='__main__')", str(script)],
                                          base_env(device))})
        if not (BIN / "opentc-train").exists():
            return rows   # the toolkit is not installed here (a GPU machine with the launcher only)
        for backend in backends:
            job = work / f"job-{backend}"
            shutil.copytree(REPO / "sample" / "job", job)
            shutil.copy(script, job / "code" / "first_line.py")
            hps = {"sagemaker_program": json.dumps("first_line.py"),
                   "sagemaker_training_compiler_enabled": json.dumps(backend != "eager"),
                   "sagemaker_training_compiler_backend": json.dumps(backend if backend != "eager" else "xla"),
                   "sagemaker_training_compiler_cache": "false"}
            if backend == "eager":
                del hps["sagemaker_training_compiler_backend"]
            (job / "input" / "config" / "hyperparameters.json").write_text(json.dumps(hps))
            env = {**base_env(device), "SAGEMAKER_BASE_DIR": str(job),
                   "SAGEMAKER_TRAINING_MODULE": "opentc_toolkit.entry:main"}
            env.pop("PJRT_DEVICE")   # as in a real job: the toolkit decides
            rows.append({"command": f"train ({'compiler off' if backend == 'eager' else backend})",
                         "seconds": timed([str(BIN / "train")], env)})
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render(results: dict) -> str:
    out = [f"Machine: {results['machine']}. Device: {results['device_note']}.", ""]
    rows, eager = [], {}
    for r in results["throughput"]:
        if r["backend"] == "eager":
            eager[r["config"]] = r["median_step_s"]
        speedup = eager[r["config"]] / r["median_step_s"]
        compiled = r["backend"] != "eager"
        rows.append([r["config"], r["backend"], r["device"], f"{r['batch']}x{r['seq']}",
                     f"{r['median_step_s'] * 1000:.1f}", f"{r['tokens_per_s']:.0f}", f"{speedup:.2f}x",
                     r["graphs_compiled"] if compiled else "-", f"{r['compile_s']:.1f}" if compiled else "-",
                     f"{r['peak_memory_mb']:.0f}"])
    out += ["### 1. Steady-state step time, eager vs compiled",
            table(["model", "backend", "device", "batch x seq", "median step (ms)", "tokens/s", "vs eager",
                   "graphs compiled", "compile (s)", "peak memory (MB)"], rows), ""]
    rows = [[r["backend"], "static" if not r["dynamic"] else "changes every step", r["steps"], r["graphs_compiled"],
             f"{r['compile_s']:.1f}", f"{r['median_step_s'] * 1000:.1f}"] for r in results["graphs"]]
    out += ["### 2. Graphs compiled per job (tiny GPT-2)",
            table(["backend", "sequence length", "steps", "graphs compiled", "compile (s)", "median step (ms)"],
                  rows), ""]
    rows = [[r["backend"], r["job"], r["graphs_compiled"], r["cache_hits"], f"{r['compile_s']:.1f}",
             f"{r['first_step_done_s']:.1f}"] for r in results["cache"]]
    out += ["### 3. Persistent compilation cache, two identical jobs (small GPT-2)",
            table(["backend", "job", "graphs compiled", "loaded from cache", "compile (s)",
                   "process start to first finished step (s)"], rows), ""]
    rows = [[r["command"], f"{r['seconds']:.2f}"] for r in results["launcher"]]
    out += ["### 4. Launcher overhead: start of the command to the script's first line (median)",
            table(["command", "seconds"], rows)]
    return "\n".join(out)


def available_backends(asked: str) -> list[str]:
    """The backends asked for that can run here: XLA needs torch_xla."""
    backends = [r.strip() for r in asked.split(",") if r.strip()]
    if "xla" in backends:
        try:
            import torch_xla  # noqa: F401
        except ImportError:
            print("torch_xla is not installed: XLA left out", file=sys.stderr)
            backends.remove("xla")
    return backends


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer steps and repeats (a smoke run)")
    p.add_argument("--backends", default="eager,xla,inductor", help="comma-separated: eager, xla, inductor")
    p.add_argument("--json", default=str(HERE / "results" / "latest.json"))
    args = p.parse_args()
    backends = available_backends(args.backends)
    gpus = gpu_count()
    device = "CUDA" if gpus else "CPU"
    import torch

    versions = f"torch {torch.__version__}"
    if "xla" in backends:
        import torch_xla

        versions += f", torch-xla {torch_xla.__version__}"
    compared = ", ".join(backends)
    gpu_name = torch.cuda.get_device_name(0) if gpus else ""
    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, {versions}",
        "device": device,
        "device_note": (f"{gpus} GPU(s) ({gpu_name}): {compared} on CUDA" if gpus else
                        f"no GPU here: ran on CPU, {compared} on the CPU (CPU numbers say nothing about GPU "
                        f"speed-ups)"),
        "backends": backends,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    started = time.time()
    for name, run in (("throughput", lambda: throughput(device, args.quick, backends)),
                      ("graphs", lambda: graphs(device, args.quick, backends)),
                      ("cache", lambda: cache(device, args.quick, backends)),
                      ("launcher", lambda: launcher_overhead(device, 1 if args.quick else 3, backends))):
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        results[name] = run()
    results["seconds"] = round(time.time() - started, 1)
    publish(results, render(results), args.json)


def publish(results: dict, text: str, path: str) -> None:
    """Print the tables, and keep them with the measurements in a JSON file (RESULTS.md quotes the tables)."""
    print(text)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({**results, "table": text}, indent=2))
        print(f"\nwrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Unsharded DDP against FSDP2 on the same model, each eager and compiled with torch.compile (Inductor), on CPU:
the memory each worker holds and the step time, side by side in one run (issue 25).

    .venv-inductor/bin/python benchmarks/sharding_benchmark.py [--allocators default,mmap] [--width 512]
        [--depth 8] [--batch 128] [--warmup 3] [--steps 10] [--json FILE]

Every configuration is a run of its own: `python -m torch.distributed.run --nproc-per-node 2` starting two real
worker processes (sharding_worker.py) over gloo on the CPU, OMP_NUM_THREADS=1 each (two workers, two cores), in an
environment without TORCHINDUCTOR_*/TRITON_*/TORCH_* settings and with an empty Inductor cache of each worker's own
(every compile cold). The same model (residual MLP blocks), seed, data and AdamW in each. Reported per worker (the
larger of the two): the model state it holds (parameters, gradients and optimizer state; FSDP2's local shards),
its peak resident memory and that peak's growth over the memory just before the model was built (the torch import
is most of a process's RSS), the first step (compiling included), the median step after warm-up with rank 0's
forward / backward / optimizer split, and the final loss (mean over the ranks). Allocators: `default` is glibc's
malloc as a job gets it; `mmap` sets MALLOC_MMAP_THRESHOLD_=65536, so that every buffer over 64 KiB goes back to
the system when freed and RSS follows the memory in use (glibc otherwise raises that threshold after large frees
and keeps later buffers of that size in its heap).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compiler_benchmark import publish, table

HERE = Path(__file__).resolve().parent
WORKER = HERE / "sharding_worker.py"
CONFIGS = {   # name: (wrapper, compiled)
    "DDP, eager": ("ddp", False),
    "DDP + torch.compile (Inductor)": ("ddp", True),
    "FSDP2, eager": ("fsdp2", False),
    "FSDP2 + torch.compile (Inductor)": ("fsdp2", True),
}
ALLOCATORS = {   # name: (what the table calls it, environment)
    "default": ("glibc default", {}),
    "mmap": ("glibc, mmap over 64 KiB", {"MALLOC_MMAP_THRESHOLD_": "65536"}),
}
SCRUBBED = ("SM_", "SAGEMAKER_", "PJRT_", "XLA_", "PT_XLA_", "OPENTC_", "TORCHINDUCTOR_", "TRITON_", "TORCH_",
            "TORCHELASTIC_", "MALLOC_", "OMP_", "MKL_")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_config(python: str, wrap: str, compiled: bool, allocator: str = "default", *, nproc: int = 2,
               width: int = 512, depth: int = 8, batch: int = 128, warmup: int = 3, steps: int = 10,
               timeout: float = 1200) -> dict:
    """One configuration: `nproc` workers under torch.distributed.run; rank 0's result, with the run's wall time."""
    cache = tempfile.mkdtemp(prefix="opentc-bench-sharding-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
    env.update({"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": cache, **ALLOCATORS[allocator][1]})
    command = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), str(WORKER), "--wrap", wrap, "--compile", "yes" if compiled else "no",
               "--width", str(width), "--depth", str(depth), "--batch", str(batch), "--warmup", str(warmup),
               "--steps", str(steps)]
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        out, _ = proc.communicate()
        raise RuntimeError(f"{wrap} (compile {compiled}) still running after {timeout} s:\n{out[-3000:]}") from None
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    wall = time.monotonic() - started
    for line in out.splitlines():
        if line.startswith("SHARDING_RESULT "):
            return {**json.loads(line[len("SHARDING_RESULT "):]), "allocator": allocator, "wall_s": wall}
    raise RuntimeError(f"{wrap} (compile {compiled}) failed (exit code {proc.returncode}):\n{out[-3000:]}")


def descendants(pid: int) -> list[int]:
    """Every living process under pid (Linux /proc); torch.distributed.run starts its workers in sessions of their
    own, so a process group does not reach them."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop(proc: subprocess.Popen) -> None:
    """A run past its time: the launcher and its workers, every one by its id."""
    for pid in [*descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def measure(python: str, allocators: list[str], sizes: dict) -> list[dict]:
    rows = []
    for allocator in allocators:
        for name, (wrap, compiled) in CONFIGS.items():
            print(f"{name}, allocator {allocator} ...", file=sys.stderr, flush=True)
            rows.append({"config": name, **run_config(python, wrap, compiled, allocator, **sizes)})
    return rows


def worst(row: dict, key: str) -> float:
    return max(r[key] for r in row["ranks"])


def render(results: dict) -> str:
    rows = results["rows"]
    first = rows[0]
    lines = [f"Machine: {results['machine']}. {first['world']} worker processes per configuration over gloo on the "
             f"CPU, OMP_NUM_THREADS=1 each; the model: {first['depth']} residual MLP blocks {first['width']} wide "
             f"({first['parameters'] / 1e6:.1f}M parameters), AdamW, global batch {first['batch']} rows, "
             f"{first['warmup']} warm-up and {first['steps']} measured steps; every compile cold. Per worker: the "
             "larger of the two workers' figures; the step split is rank 0's.", ""]
    ddp_state = {r["allocator"]: worst(r, "model_state_bytes") for r in rows if r["config"] == "DDP, eager"}
    body = []
    for r in rows:
        state = worst(r, "model_state_bytes")
        growth = max(x["peak_rss_mb"] - x["rss_before_model_mb"] for x in r["ranks"])
        phases = r["ranks"][0]["median_phase_s"]
        vs_ddp = f"{state / ddp_state[r['allocator']]:.2f}x" if r["allocator"] in ddp_state else "-"
        body.append([r["config"], ALLOCATORS[r["allocator"]][0], f"{state / 2**20:.0f}", vs_ddp,
                     f"{worst(r, 'peak_rss_mb'):.0f}", f"+{growth:.0f}", f"{worst(r, 'first_step_s'):.1f}",
                     f"{worst(r, 'median_step_s') * 1000:.0f}",
                     " / ".join(f"{phases[k] * 1000:.0f}" for k in ("forward", "backward", "optimizer")),
                     r["ranks"][0].get("graphs_captured", "-"), f"{r['final_loss']:.6f}"])
    lines.append(table(["configuration", "allocator", "model state per worker (MB)", "state vs DDP",
                        "peak RSS per worker (MB)", "RSS growth from before the model (MB)", "first step (s)",
                        "median step (ms)", "forward / backward / optimizer (ms)", "graphs captured", "final loss"],
                       body))
    lines += ["", losses_line(rows)]
    return "\n".join(lines)


def losses_line(rows: list[dict]) -> str:
    """Whether DDP and FSDP2 agree, eager and compiled, and how far compiled is from eager."""
    loss = {(r["allocator"], r["config"]): r["final_loss"] for r in rows}
    pairs, compiled = [], []
    for allocator in dict.fromkeys(r["allocator"] for r in rows):
        for ddp, fsdp in (("DDP, eager", "FSDP2, eager"),
                          ("DDP + torch.compile (Inductor)", "FSDP2 + torch.compile (Inductor)")):
            if (allocator, ddp) in loss and (allocator, fsdp) in loss:
                pairs.append(abs(loss[allocator, ddp] - loss[allocator, fsdp]) / abs(loss[allocator, ddp]))
        for eager, comp in (("DDP, eager", "DDP + torch.compile (Inductor)"),
                            ("FSDP2, eager", "FSDP2 + torch.compile (Inductor)")):
            if (allocator, eager) in loss and (allocator, comp) in loss:
                compiled.append(abs(loss[allocator, eager] - loss[allocator, comp]) / abs(loss[allocator, eager]))
    words = []
    if pairs:
        verdict = "agree within float rounding" if max(pairs) < 1e-5 else "DISAGREE"
        words.append(f"Final losses: DDP and FSDP2 {verdict} (largest relative difference, eager with eager and "
                     f"compiled with compiled: {max(pairs):.1e})")
    if compiled:
        words.append(f"compiled against eager: {max(compiled):.1e} (Inductor's kernels round differently)")
    return "; ".join(words) + "."


def machine(python: str) -> str:
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                             text=True, check=True).stdout.strip()
    return f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, torch {version}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter the workers run under")
    p.add_argument("--allocators", default=",".join(ALLOCATORS), help="comma-separated: " + ", ".join(ALLOCATORS))
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--json", default=str(HERE / "results" / "sharding.json"))
    args = p.parse_args()
    allocators = [a for a in args.allocators.split(",") if a]
    unknown = [a for a in allocators if a not in ALLOCATORS]
    if unknown or not allocators:
        p.error(f"unknown allocator(s) {unknown}" if unknown else "no allocator to measure")
    sizes = {"width": args.width, "depth": args.depth, "batch": args.batch, "warmup": args.warmup,
             "steps": args.steps}
    started = time.time()
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(args.python),
               "command": " ".join([Path(sys.executable).name, *sys.argv]),
               "rows": measure(args.python, allocators, sizes)}
    results["seconds"] = round(time.time() - started, 1)
    publish(results, render(results), args.json)


if __name__ == "__main__":
    main()

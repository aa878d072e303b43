"""What counting host reads costs (opentc_launcher.host_reads, on in every job with a summary): each reading method of a
tensor, timed bare and wrapped, in one process, as a GPU job sees it (a host tensor: not counted, one check) and as a
CPU job does (counted at its place, or left out as an optimizer's bookkeeping after a look at its caller).

    .venv/bin/python benchmarks/host_reads_benchmark.py [--calls N] [--json FILE]

Prints the microseconds per call and the extra per call, and an optimizer step's worth: torch's AdamW on a CPU
reads its step counter once per parameter tensor (148 for GPT-2 small), each left out after a look at its caller.
"""

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

from compiler_benchmark import publish, table

HERE = Path(__file__).resolve().parent
GPT2_SMALL_TENSORS = 148   # parameter tensors: AdamW's step-counter reads per step on a CPU


def per_call_us(call, calls: int) -> float:
    best = float("inf")
    for _ in range(5):   # the best of five: the machine's other work only ever adds
        started = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--json", default=str(HERE / "results" / "host-reads.json"))
    args = p.parse_args()
    import torch

    from opentc_launcher.host_reads import READ_METHODS, HostReads

    scalar, vector = torch.tensor(1.5), torch.arange(16.0)
    cases = {".item()": lambda: scalar.item(), "bool(t)": lambda: bool(scalar), "float(t)": lambda: float(scalar),
             ".tolist()": lambda: vector.tolist(), ".cpu()": lambda: vector.cpu()}
    bare = {name: per_call_us(call, args.calls) for name, call in cases.items()}
    originals = {name: torch.Tensor.__dict__.get(name) for name in READ_METHODS}
    watch = HostReads("cuda").install()       # a GPU job: a host tensor is looked at and let through
    on_a_gpu = {name: per_call_us(call, args.calls) for name, call in cases.items()}
    watch.device_type = "cpu"                 # a CPU job: counted, with its place
    counted = {name: per_call_us(call, args.calls // 10) for name, call in cases.items()}
    # What torch/optim/adamw.py does with its step counter on a CPU, from a file of that name: left out after a look.
    bookkeeping_code = compile("def read(step):\n    return step.item()\n", "/x/torch/optim/adamw.py", "exec")
    namespace: dict = {}
    exec(bookkeeping_code, namespace)
    step = torch.tensor(3.0)
    left_out = per_call_us(lambda: namespace["read"](step), args.calls // 10)
    for name, original in originals.items():
        if original is None:
            delattr(torch.Tensor, name)
        else:
            setattr(torch.Tensor, name, original)
    bare_left_out = per_call_us(lambda: namespace["read"](step), args.calls)
    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
                   f"torch {torch.__version__}",
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "calls": args.calls,
        "bare_us": bare, "gpu_job_us": on_a_gpu, "cpu_job_counted_us": counted,
        "bookkeeping_us": {"with": left_out, "without": bare_left_out},
    }
    publish(results, render(results), args.json)


def render(results: dict) -> str:
    bare, on_a_gpu, counted = results["bare_us"], results["gpu_job_us"], results["cpu_job_counted_us"]
    rows = [[name, f"{bare[name]:.2f}", f"{on_a_gpu[name]:.2f}", f"+{on_a_gpu[name] - bare[name]:.2f}",
             f"{counted[name]:.2f}", f"+{counted[name] - bare[name]:.2f}"] for name in bare]
    left_out, bare_left_out = results["bookkeeping_us"]["with"], results["bookkeeping_us"]["without"]
    extra = left_out - bare_left_out
    return "\n".join([
        f"Machine: {results['machine']}. The best of five runs of {results['calls']:,} calls (a tenth as many "
        f"counted).", "",
        table(["read", "bare (us)", "GPU job: a host tensor (us)", "extra", "CPU job: counted (us)", "extra"], rows),
        "",
        f"An optimizer's step-counter read on a CPU job (from torch/optim, left out as bookkeeping): "
        f"{bare_left_out:.2f} us bare, {left_out:.2f} us watched (+{extra:.2f} us); torch's AdamW on a CPU reads it "
        f"once per parameter tensor: for GPT-2 small's {GPT2_SMALL_TENSORS}, about "
        f"+{extra * GPT2_SMALL_TENSORS / 1000:.2f} ms a step."])


if __name__ == "__main__":
    main()

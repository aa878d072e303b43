"""Where a Trainer step's time goes: the host's work, the device's, and what makes one wait for the other.

On the H200 (benchmarks/RESULTS.md, "GPU: one NVIDIA H200") the Trainer's step with the whole model compiled took
29.5 ms where a plain loop's took 16.5 ms on the same model and shape; eager's were alike (33.0 and 32.3 ms). This
script trains GPT-2 with the Trainer (random tokens, no data set to read) and, over a window of steps in the steady
state, takes torch's profiler (the device's kernels, CUDA's synchronizing calls, kernel launches) and, over another,
Python's own profile of the host (which functions the step's host time is spent in). Run it as a job's worker runs,
under `opentc-run`, so that the backend's defaults and patches are those of a job:

    opentc-run --standalone --nproc-per-node 1 --backend inductor --device cuda \
        benchmarks/trainer_step_profile.py --config gpt2 --seq 512 --batch 8
    (--defaults-off regional before the script: the whole model; --backend eager: the compiler off)

It prints `BENCH_RESULT {json}`: the median step outside the windows, and for the profiled window each step's wall
time, the device's busy time (its kernels' time summed: one stream), synchronizing calls and kernel launches a step,
the host's largest self times (torch's events, then Python's functions). On a CPU there is no device: the busy time
is null and the rest is the host's. dev/gpu-kit's figure 9 runs it.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import pstats
import statistics
import sys
import tempfile
import time

from bench_worker import CONFIGS, VOCAB, VOCABS, build_model  # the plain loop's GPT-2s, built as it builds them

# CUDA runtime calls after which the host has waited for the device (cudaMemcpy without Async: a copy the host waits
# for, which waits for the work queued before it)
SYNCHRONIZING = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
TOP = 12


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=40, help="optimizer steps in all")
    p.add_argument("--window", type=int, default=5, help="steps in each profiled window")
    p.add_argument("--output-dir", default="")
    args = p.parse_args(argv)
    first_profiled = args.steps - 2 * args.window   # the two windows at the end, in the steady state
    if first_profiled < 10:
        p.error(f"--steps {args.steps}: at least 10 steps before the two windows of {args.window}")

    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    cuda = torch.cuda.is_available()
    vocab = VOCABS.get(args.config, VOCAB)

    class RandomTokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return args.steps * args.batch

        def __getitem__(self, i: int) -> dict:
            ids = torch.randint(0, vocab, (args.seq,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}

    ends: list[float] = []
    window: dict = {}

    class Profiled(TrainerCallback):
        """Torch's profiler over the first window, Python's over the second; each window starts and ends with the
        device drained, so that its kernels are the window's own."""

        def on_step_begin(self, _args, state, _control, **_kw):
            if state.global_step == first_profiled:
                drain()
                window["torch_start"] = time.perf_counter()
                activities = [torch.profiler.ProfilerActivity.CPU] + (
                    [torch.profiler.ProfilerActivity.CUDA] if cuda else [])
                window["torch"] = torch.profiler.profile(activities=activities)
                window["torch"].__enter__()
            elif state.global_step == first_profiled + args.window:
                drain()
                window["python_start"] = time.perf_counter()
                window["python"] = cProfile.Profile()
                window["python"].enable()

        def on_step_end(self, _args, state, _control, **_kw):
            ends.append(time.perf_counter())
            if state.global_step == first_profiled + args.window:
                drain()
                window["torch_s"] = time.perf_counter() - window["torch_start"]
                window["torch"].__exit__(None, None, None)
            elif state.global_step == first_profiled + 2 * args.window:
                window["python"].disable()
                drain()
                window["python_s"] = time.perf_counter() - window["python_start"]

    def drain() -> None:
        if cuda:
            torch.cuda.synchronize()

    torch.manual_seed(0)
    model = build_model(args.config, vocab, args.seq, dropout=0.1)
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="opentc-step-profile-")
    training = TrainingArguments(
        output_dir=output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch, bf16=True,
        use_cpu=not cuda, optim="adamw_torch_fused" if cuda else "adamw_torch", logging_steps=10,
        save_strategy="no", report_to="none", disable_tqdm=True, dataloader_drop_last=True, seed=0)
    Trainer(model=model, args=training, train_dataset=RandomTokens(), callbacks=[Profiled()]).train()

    steps_s = [b - a for a, b in itertools.pairwise(ends)]
    outside = steps_s[5:first_profiled - 1]   # after the first steps (compiling), before the windows
    result = {"config": args.config, "seq": args.seq, "batch": args.batch, "device": "cuda" if cuda else "cpu",
              "window_steps": args.window,
              "median_step_s": statistics.median(outside) if outside else None,
              **torch_window(window["torch"], window["torch_s"], args.window, cuda),
              **python_window(window["python"], window["python_s"], args.window)}
    print("BENCH_RESULT " + json.dumps(result), flush=True)
    return 0


def torch_window(prof, seconds: float, steps: int, cuda: bool) -> dict:
    """The torch profiler's window, a step's worth: wall time, the device's busy time, synchronizing calls, kernel
    launches, and the host's largest self times among torch's events."""
    events = prof.key_averages()
    kernels = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
    busy_us = None   # unknown, not 0, where the profiler recorded no kernel (CUPTI unavailable)
    if cuda and kernels:
        busy_us = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
                      for e in kernels)
    counts = {e.key: e.count for e in events}
    host = sorted((e for e in events if e not in kernels), key=lambda e: e.self_cpu_time_total, reverse=True)
    return {
        "window_step_s": seconds / steps,
        "device_busy_step_s": busy_us / 1e6 / steps if busy_us is not None else None,
        "device_busy_share": busy_us / 1e6 / seconds if busy_us is not None else None,
        "synchronizing_calls_a_step": {name: counts[name] / steps for name in SYNCHRONIZING if counts.get(name)},
        "kernel_launches_a_step": sum(counts.get(name, 0) for name in LAUNCHES) / steps,
        "host_top_torch": [{"name": e.key, "self_ms_a_step": e.self_cpu_time_total / 1e3 / steps,
                            "calls_a_step": e.count / steps} for e in host[:TOP]],
    }


def python_window(profile: cProfile.Profile, seconds: float, steps: int) -> dict:
    """Python's profile of the second window, a step's worth: its wall time (the profile's own cost in it) and the
    functions with the largest self times, where the host's time went."""
    stats = pstats.Stats(profile)
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)   # (calls, prim, tottime, ...)
    top = [{"function": f"{os.path.basename(path)}:{line}({name})", "self_ms_a_step": tottime * 1e3 / steps,
            "calls_a_step": calls / steps}
           for (path, line, name), (_prim, calls, tottime, _cum, _callers) in rows[:TOP]]
    return {"profiled_step_s": seconds / steps, "host_top_python": top}


if __name__ == "__main__":
    sys.exit(main())

"""What the Trainer's FLOPs count costs the host a step, before and after the image counts the parameters once
(library patch transformers-trainer-counts-parameters-once, opentc_launcher.sync_free_step): Trainer.floating_point_ops
on GPT-2 small (124M) for a batch of 8 x 512, called --calls times each way, without a profiler.

    .venv/bin/python benchmarks/trainer_flops_count.py [--calls 50]

The patch is applied in this process, to the installed transformers (nothing else runs here).
"""

import argparse
import time
import types


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=50)
    args = p.parse_args()
    import torch
    import transformers
    import transformers.trainer as trainer_module
    from transformers import GPT2Config, GPT2LMHeadModel

    from opentc_launcher.sync_free_step import _counts_parameters_once

    trainer = types.SimpleNamespace(model=GPT2LMHeadModel(GPT2Config()))   # what floating_point_ops reads of it
    inputs = {"input_ids": torch.ones(8, 512, dtype=torch.long)}

    def per_call() -> tuple[float, int]:
        started = time.perf_counter()
        for _ in range(args.calls):
            flops = trainer_module.Trainer.floating_point_ops(trainer, inputs)
        return (time.perf_counter() - started) / args.calls, flops

    before = per_call()
    _counts_parameters_once(trainer_module)
    after = per_call()
    print(f"transformers {transformers.__version__}, GPT-2 small, batch 8 x 512, {args.calls} calls each\n")
    print("| Trainer.floating_point_ops | ms a call | FLOPs counted |")
    print("|---|---|---|")
    print(f"| each step counts the parameters | {before[0] * 1000:.3f} | {before[1]:,} |")
    print(f"| counted once (the patch) | {after[0] * 1000:.3f} | {after[1]:,} |")
    if before[1] != after[1]:
        raise SystemExit("the patched count differs from transformers' own")


if __name__ == "__main__":
    main()

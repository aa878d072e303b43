"""The plain-loop twin of tests/scripts/run_clm_tiny.py, for benchmarks/trainer_loop_benchmark.py: the same GPT-2
(run_clm_tiny's config, its --config_overrides, its dropout), the same batch and block size and the same optimizer,
trained by a loop a user writes (forward, backward, AdamW's step, zero_grad; the loss printed every --logging_steps)
instead of the Trainer, so that the Trainer's own cost per step is the difference. With --compile the loop calls
torch.compile(model) itself, as a plain script does; the backend decides the rest (regional, its head, or whole).

Token ids are drawn below --token_ids (run_clm_tiny's tokenizer has 400) whatever the model's vocabulary.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config_overrides", default="")
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--per_device_train_batch_size", type=int, default=8)
    p.add_argument("--max_steps", type=int, default=40)
    p.add_argument("--logging_steps", type=int, default=10)
    p.add_argument("--learning_rate", type=float, default=5e-5)   # the Trainer's default
    p.add_argument("--token_ids", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, n_inner=256, vocab_size=args.token_ids,
                        n_positions=args.block_size, use_cache=False)   # run_clm_tiny's, and no cache in training
    if args.config_overrides:
        config.update_from_string(args.config_overrides)
    model = GPT2LMHeadModel(config).train()
    step_model = torch.compile(model) if args.compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    generator = torch.Generator().manual_seed(args.seed)
    for step in range(1, args.max_steps + 1):
        ids = torch.randint(0, args.token_ids, (args.per_device_train_batch_size, args.block_size), generator=generator)
        loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % args.logging_steps == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()

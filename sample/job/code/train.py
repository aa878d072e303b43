"""Sample training script: a tiny GPT-2, randomly initialised from tiny-gpt2.json, trained on the text
files of the `train` channel with plain PyTorch/XLA (no Trainer).

It follows Training Compiler's best practices: fixed-length blocks (static shapes, the last uneven batch
dropped), the loss read back to the host only every --log_every steps, the model moved to the CPU before
saving, and no key/value cache in training (use_cache false in tiny-gpt2.json, as the Trainer sets it: the
cache serves generation, costs memory in training, and breaks the compiled graph on torch 2.7). It runs unchanged without the compiler (plain PyTorch on CPU or CUDA) and on the Inductor
backend, where it compiles the model with torch.compile: a plain script has to, and it reads the backend from
ACCELERATE_DYNAMO_BACKEND, the variable the toolkit sets for accelerate and the Trainer.
"""

import argparse
import glob
import json
import os
import sys
import time

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--max_steps", type=int, default=30)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=3e-3)
    p.add_argument("--vocab_size", type=int, default=400)
    p.add_argument("--log_every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model_config", default=os.path.join(HERE, "tiny-gpt2.json"))
    p.add_argument("--model_dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    p.add_argument("--train_dir", default=os.environ.get("SM_CHANNEL_TRAIN", "data"))
    p.add_argument("--output_data_dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "output"))
    return p.parse_args()


def use_xla() -> bool:
    """The toolkit sets USE_TORCH_XLA=0 when the compiler is off; transformers reads the same switch."""
    if os.environ.get("USE_TORCH_XLA", "1").lower() in ("0", "false", "no"):
        return False
    try:
        import torch_xla  # noqa: F401
    except ImportError:
        return False
    return True


def build_tokenizer(texts, vocab_size):
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=vocab_size, special_tokens=["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")


def fixed_blocks(ids, block_size):
    """Concatenated token ids cut into equal blocks (as run_clm does): every step has the same shape."""
    usable = len(ids) // block_size * block_size
    return torch.tensor(ids[:usable], dtype=torch.long).view(-1, block_size)


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    texts = []
    for path in sorted(glob.glob(os.path.join(args.train_dir, "**", "*.txt"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            texts.append(f.read())
    if not texts:
        raise SystemExit(f"no .txt files in the train channel {args.train_dir}")
    tokenizer = build_tokenizer(texts, args.vocab_size)
    ids = []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    blocks = fixed_blocks(ids, args.block_size)[rank::world]  # each worker its own shard
    if len(blocks) < args.batch_size:
        raise SystemExit(f"only {len(blocks)} blocks of {args.block_size} tokens: need at least --batch_size")

    with open(args.model_config, encoding="utf-8") as f:
        config = GPT2Config(**json.load(f), vocab_size=len(tokenizer), n_positions=args.block_size,
                            bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config)

    if use_xla():
        import torch_xla
        import torch_xla.core.xla_model as xm

        device = torch_xla.device()
        step_fn = xm.optimizer_step          # all-reduces gradients across workers, then steps
        sync = torch_xla.sync                # cut the graph here: one compiled graph per step
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        step_fn = lambda opt: opt.step()     # noqa: E731
        sync = lambda: None                  # noqa: E731
    print(f"rank {rank}/{world}: training on {device} with {len(blocks)} blocks", flush=True)

    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    compiler = os.environ.get("ACCELERATE_DYNAMO_BACKEND", "no").lower()
    if compiler not in ("", "no"):
        model = torch.compile(model, backend=compiler)   # the parameters stay the model's: the optimizer is fine
    batches_per_epoch = len(blocks) // args.batch_size   # the last uneven batch is dropped
    losses, started = [], time.time()
    for step in range(args.max_steps):
        start = (step % batches_per_epoch) * args.batch_size
        batch = blocks[start:start + args.batch_size].to(device)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        step_fn(optimizer)
        optimizer.zero_grad()
        sync()
        if step % args.log_every == 0 or step == args.max_steps - 1:
            value = loss.item()                # a device-to-host read: only at log points
            losses.append({"step": step, "loss": value})
            print(f"step {step}: loss {value:.4f}", flush=True)

    if rank == 0:
        os.makedirs(args.model_dir, exist_ok=True)
        getattr(model, "_orig_mod", model).to("cpu").save_pretrained(args.model_dir)
        tokenizer.save_pretrained(args.model_dir)
        os.makedirs(args.output_data_dir, exist_ok=True)
        with open(os.path.join(args.output_data_dir, "metrics.json"), "w", encoding="utf-8") as f:
            json.dump({"device": str(device), "losses": losses, "seconds": time.time() - started,
                       "torch_xla_imported": "torch_xla" in sys.modules}, f)
    print(f"rank {rank}: done, first loss {losses[0]['loss']:.4f}, last loss {losses[-1]['loss']:.4f}",
          flush=True)


if __name__ == "__main__":
    main()

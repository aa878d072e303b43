"""A causal-LM training loop written with Hugging Face Accelerate (no Trainer), as its examples are:
Accelerator, prepare(), accelerator.backward, an LR scheduler, the loss logged every few steps, and the
model saved with save_pretrained at the end. The model is a tiny randomly initialised GPT-2 and the data
are fixed-size blocks of token ids, so nothing comes from a hub."""

import argparse
import json
import os
import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=12)
    parser.add_argument("--logging_steps", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--block_size", type=int, default=64)
    parser.add_argument("--output_dir", default=os.environ.get("SM_MODEL_DIR", "model"))
    parser.add_argument("--save", choices=["yes", "no"], default="yes")
    # GPT-2's default is on: the model builds a key/value cache even in training (the Trainer turns it off).
    parser.add_argument("--use_cache", choices=["yes", "no"], default="yes")
    args = parser.parse_args()

    accelerator = Accelerator()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, n_inner=256, vocab_size=400, n_positions=args.block_size,
                        use_cache=args.use_cache == "yes")
    model = GPT2LMHeadModel(config)
    # A learnable pattern: each block counts up from a random start, modulo the vocabulary.
    starts = torch.randint(0, config.vocab_size, (args.max_steps * args.batch_size, 1))
    blocks = (starts + torch.arange(args.block_size)) % config.vocab_size
    loader = DataLoader(TensorDataset(blocks, torch.ones_like(blocks)), batch_size=args.batch_size,
                        shuffle=True, drop_last=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = get_linear_schedule_with_warmup(optimizer, 2, args.max_steps)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    model.train()
    losses = []
    for step, (input_ids, attention_mask) in enumerate(loader, start=1):
        outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)
        accelerator.backward(outputs.loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step % args.logging_steps == 0:
            losses.append(outputs.loss.item())
            accelerator.print(f"step {step}: loss {losses[-1]:.4f}")

    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    if args.save == "yes":
        # The two ways a user saves: transformers' own call, and accelerate's.
        unwrapped.save_pretrained(args.output_dir, is_main_process=accelerator.is_main_process)
        accelerator.save_model(model, os.path.join(args.output_dir, "accelerate-save-model"))
    if accelerator.is_main_process:
        # unwrap_model keeps torch.compile's wrapper (keep_torch_compile=True): its state_dict names carry
        # "_orig_mod."; save_pretrained, forwarded to the model itself, saves the model's own names.
        own = getattr(unwrapped, "_orig_mod", unwrapped)
        trained = {name: t.detach().cpu() for name, t in own.state_dict().items()}
        reloaded = GPT2LMHeadModel.from_pretrained(args.output_dir).state_dict() if args.save == "yes" else {}
        out = os.environ.get("SM_OUTPUT_DATA_DIR", args.output_dir)
        with open(os.path.join(out, "accelerate_metrics.json"), "w") as f:
            json.dump({"device": str(accelerator.device), "losses": losses,
                       "torch_xla_imported": "torch_xla" in sys.modules,
                       # Whole (a wrapper with _orig_mod) or regionally, in place (Module.compile on its blocks).
                       "compiled": hasattr(model, "_orig_mod") or hasattr(unwrapped, "_orig_mod")
                       or any(getattr(m, "_compiled_call_impl", None) is not None for m in unwrapped.modules()),
                       "tied": unwrapped.lm_head.weight is unwrapped.transformer.wte.weight,
                       "reloaded_equal": None if args.save == "no" else sorted(trained) == sorted(reloaded)
                       and all(torch.equal(trained[k], reloaded[k]) for k in trained)}, f)


if __name__ == "__main__":
    main()

"""A plain PyTorch/XLA script with a tied GPT-2, in torch-xla's and AWS's pattern: the model built on the CPU,
`model.to(xla_device)`, the optimizer (after the move, or with `--optimizer before_move` before it), a few
steps, and `save_pretrained` from the CPU.

It reports whether lm_head and wte are still one parameter after the move, whether the optimizer holds the
model's own parameters, and whether the saved model reloads to the outputs it had on the device. With
`--where launch` it does all of this in a process started by `torch_xla.launch`, as torch-xla's examples train.
"""

import argparse
import json
import os

import torch
import torch_xla
from transformers import GPT2Config, GPT2LMHeadModel


def train_and_check(out_dir: str, name: str, optimizer_first: bool) -> None:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=120, n_positions=16,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    cpu_parameters = len(list(model.parameters()))
    if optimizer_first:   # created before the move, as many scripts do
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    device = torch_xla.device()
    model.to(device).train()
    if not optimizer_first:   # after it, as torch-xla's examples do
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tied = model.lm_head.weight is model.transformer.wte.weight
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    optimizer_holds_model = all(id(p) in in_optimizer for p in model.parameters())
    batch = (torch.arange(4 * 16).view(4, 16) % config.vocab_size).to(device)
    for _ in range(3):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
    model.eval()
    with torch.no_grad():
        logits_on_device = model(input_ids=batch).logits.cpu()
    saved = os.path.join(out_dir, f"saved-{name}")
    model.to("cpu").save_pretrained(saved)
    reloaded = GPT2LMHeadModel.from_pretrained(saved).eval()
    with torch.no_grad():
        logits_reloaded = reloaded(input_ids=batch.cpu()).logits
    report = {
        "cpu_parameters": cpu_parameters,
        "device_parameters": len(list(model.parameters())),
        "tied_after_move": tied,
        "optimizer_holds_model": optimizer_holds_model,
        "reload_max_difference": float((logits_on_device - logits_reloaded).abs().max()),
    }
    with open(os.path.join(out_dir, f"tied-{name}.json"), "w", encoding="utf-8") as f:
        json.dump(report, f)


def _mp_fn(index: int, out_dir: str, optimizer_first: bool) -> None:
    train_and_check(out_dir, f"launched{index}", optimizer_first)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--where", choices=("worker", "launch"), default="worker",
                        help="launch: train in a process torch_xla.launch starts")
    parser.add_argument("--swap_switch", choices=("as_set", "off"), default="as_set",
                        help="off: the script turns torch's parameter swap switch off itself")
    parser.add_argument("--optimizer", choices=("after_move", "before_move"), default="after_move",
                        help="when the optimizer is created")
    args = parser.parse_args()
    if args.swap_switch == "off":
        torch.__future__.set_swap_module_params_on_conversion(False)
    out_dir = os.environ.get("SM_MODEL_DIR", ".")
    if args.where == "launch":
        torch_xla.launch(_mp_fn, args=(out_dir, args.optimizer == "before_move"))
    else:
        train_and_check(out_dir, "worker", args.optimizer == "before_move")


if __name__ == "__main__":
    main()

"""run_clm in miniature: the Hugging Face Trainer on a causal LM, text cut into fixed blocks.

Like transformers' examples/pytorch/language-modeling/run_clm.py: HfArgumentParser over the script's own
arguments and TrainingArguments, `group_texts` into `block_size` blocks (static shapes), and `_mp_fn`
for xla_spawn-style launchers. The tokenizer is trained from the channel's text and the model is a tiny
randomly initialised GPT-2, so nothing comes from a hub.

It takes the arguments AWS's notebooks pass to run_clm.py where they make sense without a hub (--model_type gpt2,
--tokenizer_name FOLDER, --train_file FILE, --config_overrides, --block_size, --preprocessing_num_workers), so a
notebook's job ports to it with only the data and the tokenizer made local; run_clm.py itself is not on PyPI.
"""

import glob
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, field

from datasets import Dataset
from tokenizers import ByteLevelBPETokenizer
from transformers import (
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
    set_seed,
)


@dataclass
class DataArguments:
    block_size: int = 64
    vocab_size: int = 400
    train_dir: str = field(default_factory=lambda: os.environ.get("SM_CHANNEL_TRAIN", "data"))
    step_times_file: str = ""   # for the benchmarks: when each optimizer step ended (wall clock, time.time())
    # As run_clm's --config_overrides: "n_layer=12,n_embd=256" changes the tiny GPT-2's config.
    config_overrides: str = ""
    # run_clm's own names: a model type (GPT-2 only here), a tokenizer folder (save_pretrained's), a text file, and
    # the processes that tokenize
    model_type: str = "gpt2"
    tokenizer_name: str = ""
    train_file: str = ""
    preprocessing_num_workers: int | None = None


class StepTimes(TrainerCallback):
    def __init__(self, path):
        self.path, self.times = path, []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.time())   # wall clock: the benchmarks compare the first with their own start

    def on_train_end(self, args, state, control, **kwargs):
        with open(self.path, "w") as f:
            json.dump(self.times, f)


def main():
    data_args, training_args = HfArgumentParser((DataArguments, TrainingArguments)).parse_args_into_dataclasses()
    if data_args.model_type != "gpt2":
        raise ValueError(f"--model_type {data_args.model_type}: this stand-in for run_clm.py builds GPT-2 only")
    set_seed(training_args.seed)   # before the model is made, as run_clm.py does: the same weights every run
    lines = []
    files = [data_args.train_file] if data_args.train_file else sorted(glob.glob(os.path.join(data_args.train_dir,
                                                                                                "*.txt")))
    for path in files:
        with open(path, encoding="utf-8") as f:
            lines += [line for line in f.read().splitlines() if line.strip()]
    if data_args.tokenizer_name:
        tokenizer = AutoTokenizer.from_pretrained(data_args.tokenizer_name)
    else:
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(lines, vocab_size=data_args.vocab_size, special_tokens=["<|endoftext|>"])
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")

    raw = Dataset.from_dict({"text": lines})
    tokenized = raw.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"],
                        num_proc=data_args.preprocessing_num_workers)
    block_size = data_args.block_size

    def group_texts(examples):
        joined = {k: list(itertools.chain.from_iterable(examples[k])) for k in examples}
        total = len(joined["input_ids"]) // block_size * block_size
        result = {k: [t[i:i + block_size] for i in range(0, total, block_size)] for k, t in joined.items()}
        result["labels"] = result["input_ids"].copy()
        return result

    lm_dataset = tokenized.map(group_texts, batched=True)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, n_inner=256, vocab_size=len(tokenizer),
                        n_positions=block_size, bos_token_id=tokenizer.eos_token_id,
                        eos_token_id=tokenizer.eos_token_id)
    if data_args.config_overrides:
        config.update_from_string(data_args.config_overrides)
    model = GPT2LMHeadModel(config)
    trainer = Trainer(model=model, args=training_args, train_dataset=lm_dataset,
                      data_collator=default_data_collator,
                      callbacks=[StepTimes(data_args.step_times_file)] if data_args.step_times_file else None)
    result = trainer.train()
    trainer.save_model()
    tokenizer.save_pretrained(training_args.output_dir)
    if trainer.is_world_process_zero():
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        out = os.environ.get("SM_OUTPUT_DATA_DIR", training_args.output_dir)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "trainer_metrics.json"), "w") as f:
            json.dump({"device": str(training_args.device), "losses": losses,
                       "train_loss": result.training_loss, "blocks": len(lm_dataset),
                       "total_flos": trainer.state.total_flos,
                       "torch_xla_imported": "torch_xla" in sys.modules,
                       "gradient_checkpointing": trainer.model.is_gradient_checkpointing,
                       # FSDP2 (--fsdp with fsdp_version 2) leaves DTensor parameters; DDP plain ones
                       "sharded": any(type(p).__name__ == "DTensor" for p in trainer.model.parameters())}, f)


def _mp_fn(index):
    # For xla_spawn-style launchers.
    main()


if __name__ == "__main__":
    main()

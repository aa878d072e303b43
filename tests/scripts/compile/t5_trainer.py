"""The Hugging Face Trainer on the tiny T5 of tiny_t5.py (an encoder-decoder whose stacks' first blocks differ from
the others), with no torch_compile argument: the job's compiler settings reach it through accelerate, as in
run_clm_tiny.py. The tokenizer is trained from the channel's text, so nothing comes from a hub. Each example is
2 x LENGTH tokens of the text, the first half the encoder's input and the second the decoder's target: static shapes,
no padding, no mask (as regional_loop.py's T5 batches). Writes trainer_metrics.json: the losses and the device.
"""

import glob
import json
import os
import sys
from dataclasses import dataclass, field

from datasets import Dataset
from tiny_t5 import LENGTH, tiny_t5
from tokenizers import ByteLevelBPETokenizer
from transformers import HfArgumentParser, Trainer, TrainingArguments, default_data_collator, set_seed


@dataclass
class DataArguments:
    vocab_size: int = 400
    train_dir: str = field(default_factory=lambda: os.environ.get("SM_CHANNEL_TRAIN", "data"))


def examples(ids: list[int]) -> dict[str, list[list[int]]]:
    spans = [ids[i:i + 2 * LENGTH] for i in range(0, len(ids) - 2 * LENGTH + 1, 2 * LENGTH)]
    return {"input_ids": [s[:LENGTH] for s in spans], "labels": [s[LENGTH:] for s in spans]}


def main():
    data_args, training_args = HfArgumentParser((DataArguments, TrainingArguments)).parse_args_into_dataclasses()
    set_seed(training_args.seed)   # before the model is made: the same weights every run
    text = ""
    for path in sorted(glob.glob(os.path.join(data_args.train_dir, "*.txt"))):
        with open(path, encoding="utf-8") as f:
            text += f.read()
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(text.splitlines(), vocab_size=data_args.vocab_size, special_tokens=["<pad>", "</s>"])
    dataset = Dataset.from_dict(examples(bpe.encode(text).ids))
    trainer = Trainer(model=tiny_t5(bpe.get_vocab_size()), args=training_args, train_dataset=dataset,
                      data_collator=default_data_collator)
    trainer.train()
    if trainer.is_world_process_zero():
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        out = os.environ.get("SM_OUTPUT_DATA_DIR", training_args.output_dir)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "trainer_metrics.json"), "w") as f:
            json.dump({"device": str(training_args.device), "losses": losses, "examples": len(dataset),
                       "torch_xla_imported": "torch_xla" in sys.modules}, f)


if __name__ == "__main__":
    main()

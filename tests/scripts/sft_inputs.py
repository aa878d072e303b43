"""What TRL's sft.py needs from a hub, made locally: a tiny Qwen2 (from a config) with a tokenizer trained from the
sample's text, saved as a model folder, and that text as a jsonl data set folder (one {"text": line} a line).

Usage: sft_inputs.py TEXT_FILE MODEL_DIR DATA_DIR
"""

import json
import os
import sys

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

text_file, model_dir, data_dir = sys.argv[1:4]
with open(text_file, encoding="utf-8") as f:
    lines = [line for line in f.read().splitlines() if line.strip()]
bpe = ByteLevelBPETokenizer()
bpe.train_from_iterator(lines, vocab_size=400, special_tokens=["<|endoftext|>"])
tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
torch.manual_seed(0)
config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                     bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
Qwen2ForCausalLM(config).save_pretrained(model_dir)
tokenizer.save_pretrained(model_dir)
os.makedirs(data_dir, exist_ok=True)
with open(os.path.join(data_dir, "train.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"text": line}) + "\n" for line in lines)

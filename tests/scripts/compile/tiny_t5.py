"""The tiny T5 of the regional-compilation scripts (regional_loop.py, t5_trainer.py): one config, so that the second
job finds the first one's graphs in a shared Inductor cache. Each stack's first block carries the relative position
bias table (an Embedding) the stack's other blocks reuse: two kinds of block per stack, four in all. Three layers,
not two: with two, one graph per kind would also be one graph per block, and the graph count would prove nothing."""

from transformers import T5Config, T5ForConditionalGeneration

LAYERS = 3
LENGTH = 16   # tokens in, and tokens out, per example


def tiny_t5(vocab_size: int) -> T5ForConditionalGeneration:
    # Dropout off: eager and compiled kernels draw random numbers differently. No cache in training (use_cache).
    return T5ForConditionalGeneration(T5Config(
        vocab_size=vocab_size, d_model=32, d_kv=16, d_ff=64, num_heads=2, num_layers=LAYERS, dropout_rate=0.0,
        use_cache=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))

"""One measurement in a fresh process (so compile caches and imports never leak between measurements).

    python bench_worker.py --backend eager|xla|inductor --config tiny --seq 64 --batch 8 --steps 20 [--dynamic]
                           [--cache-dir D] [--dtype bf16] [--regional]

Prints one JSON line: median steady-state step time, tokens/s, the model's FLOPs per token (6N plus attention, for
MFU), graphs compiled, compile seconds, peak memory, and the time from BENCH_T0 (the parent's clock when it started
this process) to the end of the first step. A batch that does not fit the GPU's memory prints {"oom": true, ...}
instead (exit code 0): dev/gpu-kit's largest-batch search tries each batch in a fresh process.
Inductor compiles the model with torch.compile (default mode), its caches in --cache-dir when given; with --regional
that torch.compile is the Inductor backend's regional default's (each repeated block compiled in place, one graph
shared: opentc_launcher.inductor.regional), else torch's own (the whole model, one graph).
--dtype bf16 runs the forward pass under bf16 autocast (mixed precision; the weights stay float32).
Started by a launcher with several workers (WORLD_SIZE > 1: opentc-run, torchrun), it trains with
DistributedDataParallel over NCCL on GPUs (gloo on CPUs), compiled as DDP(torch.compile(model)); rank 0 prints
the line, with the world size, and tokens/s for the whole world.
"""

import argparse
import contextlib
import json
import os
import resource
import statistics
import tempfile
import time

CONFIGS = {
    # The sample job's model (sample/job/code/tiny-gpt2.json).
    "tiny": {"n_layer": 2, "n_head": 2, "n_embd": 64, "n_inner": 256},
    # A small GPT-2: a quarter of GPT-2 small's depth and a third of its width.
    "small": {"n_layer": 4, "n_head": 4, "n_embd": 256, "n_inner": 1024},
    # A 12-layer GPT-2 of the small one's width: depth is what regional compilation saves on.
    "gpt2-12": {"n_layer": 12, "n_head": 4, "n_embd": 256, "n_inner": 1024},
    # GPT-2 small itself (124M parameters with its vocabulary): what the GPU figures use.
    "gpt2": {"n_layer": 12, "n_head": 12, "n_embd": 768},
}
# Two other families of the tiny GPT-2's width, for regional compilation's kinds of block
# (benchmarks/regional_kinds_benchmark.py): T5, whose stacks' first block carries the position bias table (two
# kinds of block in each stack), and Llama, whose blocks are all alike. Encoder and decoder have the depth given.
T5_CONFIGS = {"t5-2": 2, "t5-6": 6}
LLAMA_CONFIGS = {"llama-2": 2}
VOCAB = 2048
VOCABS = {"gpt2": 50257}   # GPT-2's own; the smaller models keep a small vocabulary, as CPUs need


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["eager", "xla", "inductor"], required=True)
    p.add_argument("--config", choices=sorted([*CONFIGS, *T5_CONFIGS, *LLAMA_CONFIGS]), default="tiny")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dynamic", action="store_true", help="a different sequence length at every step")
    p.add_argument("--cache-dir", default="")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--regional", action="store_true", help="inductor: compile each repeated block in place")
    args = p.parse_args()
    t0 = float(os.environ.get("BENCH_T0", time.time()))
    if args.backend == "inductor":   # read when Inductor first compiles; without --cache-dir a cold one of its own
        cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="opentc-bench-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")

    import torch

    if args.backend == "xla":
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        import torch_xla.runtime as xr

        if args.cache_dir:
            xr.initialize_cache(args.cache_dir)
        device = torch_xla.device()

        def finish_step():
            torch_xla.sync()
            xm.wait_device_ops()
    else:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)

        def finish_step():
            if device.type == "cuda":
                torch.cuda.synchronize()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)
    vocab = VOCABS.get(args.config, VOCAB)
    model = build_model(args.config, vocab, args.seq).to(device).train()
    flops = flops_per_token(model, args.seq)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    compile_seconds = []
    regional_words: list[str] = []   # what regional compilation did (it says so when it compiles the model whole)
    if args.backend == "inductor":
        from torch._dynamo import callback

        started = []
        callback.on_compile_start(lambda *_: started.append(time.perf_counter()))
        callback.on_compile_end(lambda *_: compile_seconds.append(time.perf_counter() - started.pop()))
        if args.regional:
            from opentc_launcher.inductor.regional import patch_torch_compile

            patch_torch_compile(torch, regional_words.append)
        model = torch.compile(model)
    if world > 1:   # after compiling: DDP(torch.compile(model)) is the order that compiles (docs/compilers.md)
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if args.dtype == "bf16" else
                contextlib.nullcontext())
    generator = torch.Generator().manual_seed(int(os.environ.get("RANK", "0")))
    lengths = [args.seq - 8 * (i % 8) for i in range(args.warmup + args.steps)] if args.dynamic else None

    times: list[float] = []
    tokens: list[int] = []
    try:
        loss = train(args, model, optimizer, autocast, generator, lengths, vocab, device, finish_step, world, times,
                     tokens)
    except torch.cuda.OutOfMemoryError:
        print("BENCH_RESULT " + json.dumps({"oom": True, "backend": args.backend, "config": args.config,
                                            "batch": args.batch, "seq": args.seq, "dtype": args.dtype}), flush=True)
        return
    first_step_end = FIRST_STEP_END[0]

    result = {
        "backend": args.backend, "regional": args.regional, "regional_words": regional_words, "config": args.config,
        "device": str(device),
        "batch": args.batch,
        "seq": args.seq, "dynamic": args.dynamic, "steps": args.steps, "dtype": args.dtype, "world": world,
        "median_step_s": statistics.median(times),
        "tokens_per_s": statistics.median(n / t for n, t in zip(tokens, times, strict=True)),
        "first_step_done_s": first_step_end - t0,
        "flops_per_token": flops,
        "final_loss": float(loss.detach().to("cpu")),
        "peak_memory_mb": peak_memory_mb(device),
    }
    if args.backend == "xla":
        compile_time = met.metric_data("CompileTime")
        result.update(graphs_compiled=int(met.counter_value("UncachedCompile") or 0),
                      compile_s=compile_time[1] / 1e9 if compile_time else 0.0,
                      cache_hits=int(met.counter_value("PersistentCacheHit") or 0))
    if args.backend == "inductor":
        from torch._dynamo.utils import counters

        result.update(graphs_compiled=int(counters["inductor"]["fxgraph_cache_miss"]),
                      compile_s=sum(compile_seconds),
                      cache_hits=int(counters["inductor"]["fxgraph_cache_hit"]))
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
        if int(os.environ.get("RANK", "0")) != 0:
            return
    print("BENCH_RESULT " + json.dumps(result), flush=True)


def build_model(name: str, vocab: int, seq: int):
    """The model named, from a config, dropout off. No key/value cache in training (as the Trainer and the sample
    set it): with one, the blocks return a cache that the next one extends, and regional compilation leaves such a
    model whole (inductor/regional.py)."""
    if name in T5_CONFIGS:
        from transformers import T5Config, T5ForConditionalGeneration

        layers = T5_CONFIGS[name]
        return T5ForConditionalGeneration(T5Config(
            vocab_size=vocab, d_model=64, d_kv=32, d_ff=256, num_heads=2, num_layers=layers, num_decoder_layers=layers,
            dropout_rate=0.0, use_cache=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))
    if name in LLAMA_CONFIGS:
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaForCausalLM(LlamaConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=256, num_attention_heads=2, num_key_value_heads=2,
            num_hidden_layers=LLAMA_CONFIGS[name], max_position_embeddings=seq, use_cache=False))
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=seq, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, use_cache=False, **CONFIGS[name]))


FIRST_STEP_END: list[float] = []


def train(args, model, optimizer, autocast, generator, lengths, vocab, device, finish_step, world, times, tokens):
    """The measured loop: warm-up steps, then the steps whose times and tokens are kept; the last loss."""
    import torch

    loss = None
    for step in range(args.warmup + args.steps):
        length = lengths[step] if lengths else args.seq
        batch = torch.randint(0, vocab, (args.batch, length), generator=generator)
        start = time.perf_counter()
        batch = batch.to(device)
        with autocast:
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        finish_step()
        elapsed = time.perf_counter() - start
        if not FIRST_STEP_END:
            FIRST_STEP_END.append(time.time())
        if step >= args.warmup:
            times.append(elapsed)
            tokens.append(args.batch * length * world)
    return loss


def flops_per_token(model, sequence: int | None = None) -> float:
    """A training step's FLOPs per token (forward and backward), as every job's summary counts them
    (opentc_launcher.mfu): 6N for the weights' matrix multiplies, N the parameters without the position embeddings
    (the output layer shares the token embeddings: counted once), plus 12 x layers x width x sequence for attention's
    (PaLM's estimate, as nanoGPT and llm.c count it for MFU)."""
    from opentc_launcher.mfu import shape_of

    return shape_of(model.named_parameters(), model.config).flops_per_token(sequence or model.config.n_positions)


def peak_memory_mb(device) -> float:
    """The device's peak: CUDA's allocator peak on a GPU, the XLA runtime's on XLA:CUDA, else this process's peak
    resident memory (CPU and XLA:CPU keep tensors in host memory)."""
    import torch

    if getattr(device, "type", "") == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if getattr(device, "type", "") == "xla" and os.environ.get("PJRT_DEVICE") != "CPU":
        import torch_xla.core.xla_model as xm

        try:
            return xm.get_memory_info(device)["peak_bytes_used"] / 2**20
        except (KeyError, RuntimeError):
            pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB


if __name__ == "__main__":
    main()

"""One measurement in a fresh process (so compile caches and imports never leak between measurements).

    python bench_worker.py --backend eager|xla|inductor --config tiny --seq 64 --batch 8 --steps 20 [--dynamic]
                           [--cache-dir D] [--dtype bf16] [--compile whole|blocks|head|cudagraphs] [--dropout P]
                           [--fused-adamw] [--overlap]
    python bench_worker.py --variants eager,blocks,head,whole --config gpt2 ... (several in one process)

Prints one JSON line: median steady-state step time, tokens/s, the model's FLOPs per token (6N plus attention, for
MFU), graphs compiled, compile seconds, peak memory, host reads per step, and the time from BENCH_T0 (the parent's
clock when it started this process) to the end of the first step. A batch that does not fit the GPU's memory prints
{"oom": true, ...} instead (exit code 0): dev/gpu-kit's largest-batch search tries each batch in a fresh process.
Inductor compiles the model with torch.compile (default mode), its caches in --cache-dir when given. --compile says
what: `whole` (default) torch's own torch.compile(model), one graph; `blocks` each repeated block in place, one graph
shared (opentc_launcher.inductor.regional: the regional default before it compiled the head); `head` the blocks and
the model's own forward around them (lm_head and the loss) as a region too, as the image compiles a plain script's
torch.compile(model) now; `cudagraphs` the whole model as `whole`, in torch.compile's mode "reduce-overhead" (its
steps replayed as CUDA graphs, each step begun with torch.compiler.cudagraph_mark_step_begin(), as torch asks of a
training loop; on a CPU torch skips the graphs and says so). --regional is `--compile head`.
--dtype bf16 runs the forward pass under bf16 autocast (mixed precision; the weights stay float32). --dropout sets
GPT-2's three dropouts (default 0; GPT-2's own config has 0.1). --fused-adamw: torch's fused AdamW, the Trainer's
default optimizer on torch >= 2.8.
--overlap times the steps as a job's summary does: no synchronize after each step, so the host runs ahead of the GPU
as a loop without host reads does, the batches copied from pinned memory without waiting; each step's time is the
interval between the ends of two steps, and tokens/s is over the measured steps with one synchronize at their end.
Without it each step ends with a synchronize and is timed alone.
Host reads (opentc_launcher.host_reads, as every job's summary counts them: a device tensor read back by Python) are
counted in every measured step; on a GPU, so are CUDA's synchronizing calls (torch.cuda.set_sync_debug_mode), the
loop's own synchronize left out.
--variants measures several in one process, each with a fresh model from the same seed, Dynamo reset and an Inductor
cache of its own (cold: torch._inductor.utils.fresh_cache), one line each: `eager`, and Inductor's `blocks`, `head`
and `whole` as --compile has them. It saves a process start per variant (about 20 s each on the lent H100), for the
GPU kit's like-for-like figure. Inductor's start in the process (its imports, its compile workers, Triton's on a GPU)
is paid before the first variant, by a small Linear compiled and trained once in a cache of its own, so that no
variant's compile seconds carry it (before 2026-11-29's second H200 lease the first Inductor variant's did); its
seconds are each Inductor row's `inductor_start_s`. Peak memory on a CPU is the process's so far.
Started by a launcher with several workers (WORLD_SIZE > 1: opentc-run, torchrun), it trains with
DistributedDataParallel over NCCL on GPUs (gloo on CPUs), compiled as DDP(torch.compile(model)); rank 0 prints
the line, with the world size, and tokens/s for the whole world.
"""

import argparse
import contextlib
import gc
import json
import os
import resource
import statistics
import tempfile
import time
import warnings

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
SCOPES = ("whole", "blocks", "head", "cudagraphs")   # what Inductor compiles (--compile)
VARIANTS = ("eager", *SCOPES)          # --variants: eager, or Inductor with that --compile
SYNC_WARNING = "called a synchronizing CUDA operation"   # torch.cuda.set_sync_debug_mode("warn")'s words


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["eager", "xla", "inductor"])
    p.add_argument("--variants", default="", help=f"several in one process, comma-separated: {', '.join(VARIANTS)}")
    p.add_argument("--config", choices=sorted([*CONFIGS, *T5_CONFIGS, *LLAMA_CONFIGS]), default="tiny")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dynamic", action="store_true", help="a different sequence length at every step")
    p.add_argument("--cache-dir", default="")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", choices=SCOPES, default="whole", help="inductor: what is compiled")
    p.add_argument("--regional", action="store_true", help="inductor: --compile head")
    p.add_argument("--dropout", type=float, default=0.0, help="GPT-2's dropouts (residual, embedding, attention)")
    p.add_argument("--fused-adamw", action="store_true", help="torch's fused AdamW")
    p.add_argument("--overlap", action="store_true", help="no synchronize after each step (timed as a job is)")
    args = p.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.regional:
        args.compile = "head"
    if bool(variants) == bool(args.backend):
        p.error("give either --backend or --variants")
    if variants and (set(variants) - set(VARIANTS) or args.cache_dir or int(os.environ.get("WORLD_SIZE", "1")) > 1):
        p.error(f"--variants {args.variants}: comma-separated among {', '.join(VARIANTS)}, on one process, each with "
                f"a cache of its own (no --cache-dir)")
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
    reads = Reads(torch, device)
    if not variants:
        result = measure(args, args.backend, args.compile, device, finish_step, world, reads, t0)
        if args.backend == "xla" and not result.get("oom"):
            compile_time = met.metric_data("CompileTime")
            result.update(graphs_compiled=int(met.counter_value("UncachedCompile") or 0),
                          compile_s=compile_time[1] / 1e9 if compile_time else 0.0,
                          cache_hits=int(met.counter_value("PersistentCacheHit") or 0))
        if world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
            if int(os.environ.get("RANK", "0")) != 0:
                return
        print("BENCH_RESULT " + json.dumps(result), flush=True)
        return
    start_s = start_inductor(torch, device) if set(variants) - {"eager"} else None
    for variant in variants:   # each printed as it is done: a process stopped later keeps the ones before
        backend, scope = ("eager", "whole") if variant == "eager" else ("inductor", variant)
        with fresh_inductor_cache(backend):
            result = measure(args, backend, scope, device, finish_step, world, reads, t0)
        if backend == "inductor":
            result["inductor_start_s"] = start_s
        print("BENCH_RESULT " + json.dumps({"variant": variant, **result}), flush=True)
        torch._dynamo.reset()   # the next measurement's Dynamo starts afresh (its compile callbacks too)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def measure(args, backend, scope, device, finish_step, world, reads, t0) -> dict:
    """One measurement: a fresh model from seed 0, compiled as `backend` and `scope` say, trained for the warm-up
    and measured steps; its row."""
    import torch

    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    vocab = VOCABS.get(args.config, VOCAB)
    model = build_model(args.config, vocab, args.seq, args.dropout).to(device).train()
    flops = flops_per_token(model, args.seq)
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if args.fused_adamw else {}))
    compile_seconds: list[float] = []
    regional_words: list[str] = []   # what regional compilation did (it says so when it compiles the model whole)
    if backend == "inductor":
        from torch._dynamo import callback
        from torch._dynamo.utils import counters

        started = []
        callback.on_compile_start(lambda *_: started.append(time.perf_counter()))
        callback.on_compile_end(lambda *_: compile_seconds.append(time.perf_counter() - started.pop()))
        counters.clear()
        from opentc_launcher.inductor.compile_time import skip_once_only_log_calls

        skip_once_only_log_calls(torch._dynamo.config)   # the job's `logging` default: the graphs a job compiles
        model = compile_model(torch, model, scope, regional_words.append)
    if world > 1:   # after compiling: DDP(torch.compile(model)) is the order that compiles (docs/compilers.md)
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if args.dtype == "bf16" else
                contextlib.nullcontext())
    generator = torch.Generator().manual_seed(int(os.environ.get("RANK", "0")))
    lengths = [args.seq - 8 * (i % 8) for i in range(args.warmup + args.steps)] if args.dynamic else None
    try:
        run = train(args, model, optimizer, autocast, generator, lengths, vocab, device, finish_step, world, reads,
                    graphs=backend == "inductor" and scope == "cudagraphs")
    except torch.cuda.OutOfMemoryError:
        reads.stop()
        return {"oom": True, "backend": backend, "compile": scope, "config": args.config, "batch": args.batch,
                "seq": args.seq, "dtype": args.dtype}
    first_step_end = run.pop("first_step_end")
    result = {
        "backend": backend, "compile": scope if backend == "inductor" else None,
        "regional": backend == "inductor" and scope not in ("whole", "cudagraphs"),
        "regional_words": regional_words, "config": args.config,
        "device": str(device),
        "batch": args.batch,
        "seq": args.seq, "dynamic": args.dynamic, "steps": args.steps, "dtype": args.dtype, "world": world,
        "dropout": args.dropout, "fused_adamw": args.fused_adamw,
        "timing": "overlap" if args.overlap else "synchronized",
        **run,
        "first_step_done_s": first_step_end - t0,
        "flops_per_token": flops,
        "parameters": parameters,
        "peak_memory_mb": peak_memory_mb(device),
        "device_memory_mb": (torch.cuda.get_device_properties(device).total_memory / 2**20
                             if device.type == "cuda" else None),
    }
    if backend == "inductor":
        from torch._dynamo.utils import counters

        result.update(graphs_compiled=int(counters["inductor"]["fxgraph_cache_miss"]),
                      compile_s=sum(compile_seconds),
                      cache_hits=int(counters["inductor"]["fxgraph_cache_hit"]))
        if scope == "cudagraphs":   # graphs Inductor ran without CUDA graphs (a CPU's, or one it could not record)
            result.update(cudagraph_skips=int(counters["inductor"]["cudagraph_skips"]))
    return result


def compile_model(torch, model, scope: str, noted):
    """The model compiled as --compile says: torch's own torch.compile (whole), or its blocks (and its head) in place,
    as the image's regional compilation does for a plain script's torch.compile(model) (the model itself returned)."""
    if scope == "whole":
        return torch.compile(model)
    if scope == "cudagraphs":
        return torch.compile(model, mode="reduce-overhead")
    from opentc_launcher.inductor.regional import compile_regions, why_whole

    reason = why_whole(model, {})
    if reason is not None:
        noted(reason)
        return torch.compile(model)
    done = compile_regions(model, head=scope == "head")
    noted(f"{done.blocks} repeated blocks compiled in place, {done.sharing()}, {done.rest()}")
    return model


def start_inductor(torch, device) -> float:
    """Inductor's start in this process, paid once: a Linear compiled, run forward and backward, in a cold cache of its
    own (nothing of it is the model's); its seconds."""
    started = time.perf_counter()
    with fresh_inductor_cache("inductor"):
        layer = torch.compile(torch.nn.Linear(8, 8).to(device))
        layer(torch.ones(2, 8, device=device)).sum().backward()
    torch._dynamo.reset()
    return time.perf_counter() - started


def fresh_inductor_cache(backend: str):
    """A cold Inductor cache of its own (a temporary folder, Inductor's in-memory caches cleared), for one of several
    measurements in one process; nothing for eager."""
    if backend != "inductor":
        return contextlib.nullcontext()
    from torch._inductor import utils

    fresh = getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache   # renamed in torch 2.9
    return fresh()


class Reads:
    """Host reads (opentc_launcher.host_reads.HostReads, as a job's summary counts them) and, on a GPU, CUDA's
    synchronizing calls, in each measured step."""

    def __init__(self, torch, device):
        from opentc_launcher.host_reads import HostReads

        self.torch = torch
        self.host = HostReads(device.type if device.type in ("cuda", "cpu") else "xla").install()
        self.syncs = device.type == "cuda" and hasattr(torch.cuda, "set_sync_debug_mode")
        self.measuring = False
        self.reads: list[int] = []
        self.cuda_syncs: list[int] = []
        self._recording = None
        self._seen: list = []

    def start(self) -> None:
        """Each step's reads from here on are kept."""
        self.host.step_ended()   # what came before belongs to no measured step
        self.host.sites.clear()
        self.measuring, self.reads, self.cuda_syncs = True, [], []
        if self.syncs:
            self._recording = warnings.catch_warnings(record=True)
            self._seen = self._recording.__enter__()
            warnings.simplefilter("always")
            self.torch.cuda.set_sync_debug_mode("warn")

    def step_ended(self) -> None:
        self.host.step_ended()
        if not self.measuring:
            return
        self.reads.append(self.host.per_step[-1])
        if self._recording is not None:
            self.cuda_syncs.append(sum(1 for w in self._seen if SYNC_WARNING in str(w.message)))
            self._seen.clear()

    @contextlib.contextmanager
    def paused(self):
        """The loop's own synchronize, not counted."""
        if self._recording is None:
            yield
            return
        self.torch.cuda.set_sync_debug_mode(0)
        try:
            yield
        finally:
            self.torch.cuda.set_sync_debug_mode("warn")

    def stop(self) -> dict:
        """The measured steps' figures: the median reads a step, where they were, and CUDA's syncs (a GPU only)."""
        self.measuring = False
        if self._recording is not None:
            self.torch.cuda.set_sync_debug_mode(0)
            self._recording.__exit__(None, None, None)
            self._recording = None
        return {"host_reads_per_step": statistics.median(self.reads) if self.reads else None,
                "host_reads_at": sorted(self.host.sites),
                "cuda_syncs_per_step": statistics.median(self.cuda_syncs) if self.cuda_syncs else None}


def build_model(name: str, vocab: int, seq: int, dropout: float = 0.0):
    """The model named, from a config, with `dropout` (GPT-2's residual, embedding and attention dropouts; the other
    families none). No key/value cache in training (as the Trainer and the sample set it): with one, the blocks
    return a cache that the next one extends, and regional compilation leaves such a model whole
    (inductor/regional.py)."""
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

    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=seq, resid_pdrop=dropout, embd_pdrop=dropout,
                                      attn_pdrop=dropout, use_cache=False, **CONFIGS[name]))


def train(args, model, optimizer, autocast, generator, lengths, vocab, device, finish_step, world, reads,
          graphs: bool = False) -> dict:
    """The measured loop: warm-up steps, then the measured ones; their median time, tokens/s, the last loss, when the
    first step ended (time.time()) and the measured steps' reads. Synchronized, each step is timed from its batch's
    copy to its synchronize; with --overlap, from the end of the step before (its batch made and copied, from pinned
    memory without waiting, inside it), and tokens/s is over all the measured steps, synchronized once at their end."""
    import torch

    pinned = args.overlap and device.type == "cuda"
    times: list[float] = []
    tokens: list[int] = []
    loss, first_step_end, window_start = None, None, 0.0
    end = time.perf_counter()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if args.overlap:
                finish_step()
                end = window_start = time.perf_counter()
            reads.start()
        length = lengths[step] if lengths else args.seq
        batch = torch.randint(0, vocab, (args.batch, length), generator=generator)
        if pinned:
            batch = batch.pin_memory()
        start = end if args.overlap else time.perf_counter()
        if graphs:   # a new step: the CUDA graphs may reuse the memory of the step before's outputs
            torch.compiler.cudagraph_mark_step_begin()
        batch = batch.to(device, non_blocking=pinned)
        with autocast:
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        reads.step_ended()
        if not args.overlap:
            with reads.paused():
                finish_step()
        end = time.perf_counter()
        if first_step_end is None:
            first_step_end = time.time()
        if step >= args.warmup:
            times.append(end - start)
            tokens.append(args.batch * length * world)
    figures = {"median_step_s": statistics.median(times),
               "tokens_per_s": statistics.median(n / t for n, t in zip(tokens, times, strict=True))}
    if args.overlap:
        finish_step()
        window = time.perf_counter() - window_start
        figures.update(mean_step_s=window / len(times), tokens_per_s=sum(tokens) / window)
    figures.update(reads.stop())
    return {**figures, "final_loss": float(loss.detach().to("cpu")), "first_step_end": first_step_end}


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

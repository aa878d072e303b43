"""One worker of one sharding_benchmark.py configuration, started by torch.distributed.run on CPU (gloo).

    python -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port P \\
        sharding_worker.py --wrap ddp|fsdp2 --compile no|yes [--width 512] [--depth 8] [--batch 128]
        [--warmup 3] [--steps 10]

A stack of residual MLP blocks (LayerNorm, Linear width -> 4 width, GELU, Linear back), built from the same seed on
every rank, then either replicated with DistributedDataParallel (compiled as DDP(torch.compile(model)), the order
docs/compilers.md gives) or sharded with FSDP2 (fully_shard on each block, then on the root; compiled as
torch.compile(model) after sharding, as tests/scripts/fsdp2_compile.py does). AdamW is created after wrapping, so
under FSDP2 it holds only the shards. Every global batch comes from one seeded generator; each rank trains on its
slice. With --compile yes each rank compiles into its own empty Inductor cache (a folder under
TORCHINDUCTOR_CACHE_DIR named after the rank), so every compile is cold.

Each rank measures the model state it holds after the last optimizer step (parameters, gradients and AdamW's
state, DTensors counted by their local shard), its peak resident memory (ru_maxrss) and the resident memory just
before the model was built (torch's import dominates RSS), the first step's seconds (compiling included) and the
median step after warm-up. Rank 0 prints one line, `SHARDING_RESULT {json}`, with every rank's figures and the
final loss (the last step's loss, averaged over the ranks).
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time


def rss_mb() -> float:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--wrap", choices=["ddp", "fsdp2"], required=True)
    p.add_argument("--compile", choices=["no", "yes"], default="no")
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=128, help="global batch (rows); each rank trains on its slice")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if args.compile == "yes" and os.environ.get("TORCHINDUCTOR_CACHE_DIR"):   # a cold cache of this rank's own
        own = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], f"rank{rank}")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = own
        os.environ["TRITON_CACHE_DIR"] = os.path.join(own, "triton")

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:   # torch 2.5/2.6 kept it under _composable
        from torch.distributed._composable.fsdp import fully_shard

    dist.init_process_group("gloo")
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} does not split over {world} ranks")

    class Block(nn.Module):
        def __init__(self, width: int):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, 4 * width)
            self.down = nn.Linear(4 * width, width)

        def forward(self, x):
            return x + self.down(nn.functional.gelu(self.up(self.norm(x))))

    class Model(nn.Module):
        def __init__(self, width: int, depth: int):
            super().__init__()
            self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
            self.head = nn.Linear(width, 1)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)   # (rows, 1): no view out of the root module (FSDP2 warns of one)

    rss_before_model = rss_mb()
    torch.manual_seed(0)   # the same initial weights on every rank, in every configuration
    net = Model(args.width, args.depth)
    parameters = sum(p.numel() for p in net.parameters())
    if args.wrap == "ddp":
        model = DistributedDataParallel(torch.compile(net) if args.compile == "yes" else net)
    else:
        for block in net.blocks:
            fully_shard(block)
        fully_shard(net)
        model = torch.compile(net) if args.compile == "yes" else net
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)   # after wrapping: under FSDP2 it holds the shards

    data = torch.Generator().manual_seed(1)
    per_rank = args.batch // world
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    times, phases = [], []   # phases: (forward, backward with its collectives, optimizer step) per step
    for _ in range(args.warmup + args.steps):
        x = torch.randn(args.batch, args.width, generator=data)
        y = torch.tanh(x[:, : args.width // 2].sum(dim=1, keepdim=True) / args.width ** 0.5)
        start = time.perf_counter()
        loss = nn.functional.mse_loss(model(x[mine]), y[mine])
        forward = time.perf_counter()
        loss.backward()   # DDP and FSDP2 both average the gradients over the ranks
        backward = time.perf_counter()
        optimizer.step()
        if len(times) == args.warmup + args.steps - 1:
            state = model_state_bytes(net, optimizer)   # gradients still held: the peak of model state
        optimizer.zero_grad()
        end = time.perf_counter()
        times.append(end - start)
        phases.append((forward - start, backward - forward, end - backward))

    reported = loss.detach().clone()
    dist.all_reduce(reported)
    mine_result = {"rank": rank, "model_state_bytes": state, "peak_rss_mb": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_before_model_mb": rss_before_model, "rss_end_mb": rss_mb(),
        "first_step_s": times[0], "median_step_s": statistics.median(times[args.warmup:]),
        "median_phase_s": {name: statistics.median(p[i] for p in phases[args.warmup:])
                           for i, name in enumerate(("forward", "backward", "optimizer"))},
        "sharded": all(type(p).__name__ == "DTensor" for p in net.parameters())}
    if args.compile == "yes":
        from torch._dynamo.utils import counters

        mine_result.update(graphs_captured=int(counters["stats"]["unique_graphs"]),
                           graphs_compiled=int(counters["inductor"]["fxgraph_cache_miss"]))
    ranks = [None] * world
    dist.all_gather_object(ranks, mine_result)
    if rank == 0:
        result = {"wrap": args.wrap, "compile": args.compile == "yes", "world": world, "width": args.width,
                  "depth": args.depth, "parameters": parameters, "batch": args.batch, "warmup": args.warmup,
                  "steps": args.steps, "torch": torch.__version__, "final_loss": reported.item() / world,
                  "ranks": ranks}
        print("SHARDING_RESULT " + json.dumps(result), flush=True)
    # No destroy_process_group, no interpreter teardown: on torch 2.7 gloo's process group is destroyed holding the
    # GIL while its worker thread may still be freeing the last collective's tensors, which needs the GIL (about one
    # exit in ten deadlocked here; pytorch/pytorch#154976 releases the GIL there from torch 2.8). Past the barrier
    # every rank is done with every collective.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def model_state_bytes(net, optimizer) -> int:
    """Bytes of parameters, gradients and optimizer state this rank holds (a DTensor's local shard only)."""
    import torch

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    tensors = []
    for p in net.parameters():
        tensors.append(local(p))
        if p.grad is not None:
            tensors.append(local(p.grad))
    for per_param in optimizer.state.values():
        tensors += [local(v) for v in per_param.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


if __name__ == "__main__":
    main()

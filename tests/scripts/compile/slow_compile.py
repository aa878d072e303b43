"""A compile made slow on purpose, with nothing else to wait for.

- inductor: a function compiled by torch.compile with a backend that sleeps --seconds before it gives the graph back
  (Dynamo's compile callbacks, which the Inductor backend's session follows, see it as any compilation);
- xla: graphs of chained matrix multiplies, --ops of them first, twice as many in each next graph, until one sync
  lasts --seconds (how long a graph takes XLA to compile is the machine's: a fixed graph that took 3 s on one machine
  took 0.9 s on another, under the test's 1 s interval).
"""

import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--backend", choices=["inductor", "xla"], required=True)
p.add_argument("--seconds", type=float, default=3.0)
p.add_argument("--ops", type=int, default=60)
args = p.parse_args()

if args.backend == "inductor":
    def sleeping_backend(graph, example_inputs):
        time.sleep(args.seconds)
        return graph.forward

    @torch.compile(backend=sleeping_backend)
    def slow_step(x):
        return (x * 2).sin().sum()

    for _ in range(2):   # compiled once, run twice
        slow_step(torch.ones(4))
else:
    import torch_xla

    ops = args.ops
    for _ in range(6):                     # 60 ops to 1,920 at most
        x = torch.randn(32, 32, device=torch_xla.device())
        for i in range(ops):
            x = torch.tanh(x @ x * 0.01 + i)
        start = time.perf_counter()
        torch_xla.sync()
        took = time.perf_counter() - start
        print(f"a graph of {ops} ops: its sync took {took:.1f} s", flush=True)
        if took >= args.seconds:
            break
        ops *= 2
print("done", flush=True)

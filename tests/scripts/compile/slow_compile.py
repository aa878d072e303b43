"""A compile made slow on purpose, with nothing else to wait for.

- inductor: a function compiled by torch.compile with a backend that sleeps --seconds before it gives the graph back
  (Dynamo's compile callbacks, which the Inductor backend's session follows, see it as any compilation);
- xla: one graph of --ops chained matrix multiplies, which XLA takes seconds to compile.
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

    x = torch.randn(32, 32, device=torch_xla.device())
    for i in range(args.ops):
        x = torch.tanh(x @ x * 0.01 + i)
    torch_xla.sync()
print("done", flush=True)

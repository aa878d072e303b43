"""A script that starts its own training, as a launcher script of the user's does: one optimizer step of its own (a
check before the real run), then a child Python that trains for 300 steps or more and prints its losses. The
launcher's worker counts the one step; the work is the child's: it trains on until it has used more CPU than this
process (whose count it is given), as a real run does by far."""

import resource
import subprocess
import sys

import torch

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.ones(4, 8)).pow(2).mean()
loss.backward()
optimizer.step()
print(f"step 0 loss {loss.item():.4f}", flush=True)

CHILD = """
import resource, sys
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
x = torch.randn(256, 128)
parent = float(sys.argv[1])
step = 0
while step < 300 or sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) < parent + 1.0:
    step += 1
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
"""
used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
subprocess.run([sys.executable, "-c", CHILD, str(used)], check=True)

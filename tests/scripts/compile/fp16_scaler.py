"""fp16 as a plain loop writes it on a GPU: autocast and a GradScaler. --optimizer torch (torch.optim.AdamW, whose
step cannot take the overflow check as a tensor) or syncfree (torch_xla.amp.syncfree.AdamW with torch-xla's
GradScaler, which can)."""
import argparse

import torch
import torch_xla
import torch_xla.amp
import torch_xla.amp.syncfree

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--optimizer", choices=("torch", "syncfree"), default="torch")
a = p.parse_args()
torch.manual_seed(0)
device = torch_xla.device()
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
if a.optimizer == "torch":
    opt, scaler = torch.optim.AdamW(model.parameters(), lr=1e-3), torch.amp.GradScaler("cuda")
else:
    opt, scaler = torch_xla.amp.syncfree.AdamW(model.parameters(), lr=1e-3), torch_xla.amp.GradScaler()
for _ in range(a.steps):
    x = torch.randn(16, 32).to(device)
    with torch.autocast("xla", dtype=torch.float16):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    torch_xla.sync()

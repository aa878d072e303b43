"""Steps that dispatch a known number of graphs, each heavy enough to still be queued or running when the next
optimizer step ends: iteration i dispatches 1 graph (its sync) when i is even and 3 (two more syncs) when it is odd.
The report must put each graph at the step that dispatched it, whatever the device's progress."""
import torch
import torch_xla
from _common import args

a = args()
torch.manual_seed(0)
device = torch_xla.device()
w = torch.randn(512, 512, device=device) / 512 ** 0.5
x = torch.randn(512, 512, device=device)
model = torch.nn.Linear(512, 512).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)


def heavy(h):
    for _ in range(24):
        h = torch.tanh(h @ w)
    return h


for step in range(a.steps):
    loss = model(heavy(x)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    torch_xla.sync()
    if step % 2:
        for _ in range(2):
            x = heavy(x)
            torch_xla.sync()

"""Uses an op without an XLA lowering (torch.histc) inside the step."""
import torch
from _common import args, loop

a = args()
loop(lambda step: torch.randn(16, 32), a.steps, after_step=lambda step, loss, x: torch.histc(x, bins=8))

"""Breaks the static-shape rule: the batch grows by one row every step (like padding='longest')."""
import torch
from _common import args, loop

a = args()
loop(lambda step: torch.randn(8 + step, 32), a.steps, fail_at=a.fail_at)

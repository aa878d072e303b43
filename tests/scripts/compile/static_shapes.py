"""Follows the rules: the same batch shape every step, nothing read back inside the loop."""
import torch
from _common import args, loop

a = args()
loop(lambda step: torch.randn(16, 32), a.steps, fail_at=a.fail_at)

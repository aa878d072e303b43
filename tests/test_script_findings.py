"""What the workers find wrong with a script, as rules: the idle-optimizer finding judges the whole job and names the
optimizer (issue 31 F). Real torch optimizers and tensors; the check is handed each step as torch's step pre-hook
hands it (not installed here: torch's hook is global to the process)."""

import torch

from opentc_launcher.idle_optimizer import IdleOptimizerCheck
from opentc_launcher.script_findings import ScriptFindings


def step(check, optimizer, **kwargs):
    check._before_step(optimizer, (optimizer,), kwargs)   # as torch calls it: step()'s arguments, self first
    optimizer.step(**kwargs)
    optimizer.zero_grad()


def model_and_backbone():
    torch.manual_seed(0)
    backbone, head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    return backbone, head


def train_step(backbone, head):
    head(backbone(torch.randn(2, 4))).sum().backward()


def test_an_optimizer_frozen_for_its_first_step_only_trained_and_is_not_reported():
    findings = ScriptFindings(rank=0)
    check = IdleOptimizerCheck(findings)
    backbone, head = model_and_backbone()
    optimizer = torch.optim.AdamW(backbone.parameters(), lr=0.1)
    backbone.requires_grad_(False)            # the warm-up: the backbone frozen at step 0 ...
    train_step(backbone, head)
    step(check, optimizer)
    backbone.requires_grad_(True)             # ... and unfrozen from step 1 on
    for _ in range(3):
        train_step(backbone, head)
        step(check, optimizer)
    check.conclude()
    assert findings.found == []


def test_each_optimizer_that_never_trained_is_named_with_its_steps():
    findings = ScriptFindings(rank=0)
    check = IdleOptimizerCheck(findings)
    backbone, head = model_and_backbone()
    stale = torch.optim.AdamW(torch.nn.Linear(4, 4).parameters(), lr=0.1)   # made before a "move": never used
    trains = torch.optim.SGD(head.parameters(), lr=0.1)
    other_stale = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    for _ in range(3):
        train_step(backbone, head)
        step(check, stale)
        step(check, trains)
        step(check, other_stale)
    step(check, stale, closure=lambda: None)   # a closure computes its own gradients: not judged
    check.conclude()
    check.conclude()                           # once
    assert findings.found == [
        "AdamW (optimizer 1 of 3 that stepped) found no gradient on any of the 2 parameter(s) it holds in any of its 3 "
        "step(s): this job trained nothing with it." + findings.found[0].split("trained nothing with it.")[1],
        "AdamW (optimizer 3 of 3 that stepped) found no gradient on any of the 2 parameter(s) it holds in any of its 3 "
        "step(s): this job trained nothing with it." + findings.found[1].split("trained nothing with it.")[1],
    ]
    assert "created before the model was sharded (fully_shard)" in findings.found[0]

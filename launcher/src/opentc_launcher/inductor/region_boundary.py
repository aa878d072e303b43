"""Where a region compiled around a model's blocks stops: what regional compilation puts in place of the forward of
the part of a model that holds its repeated blocks (its trunk: GPT-2's `transformer`, Llama's `model`, T5's encoder and
decoder), so that the model's own forward (its output layer, its loss) compiles as a region of its own while the
trunk runs as it did, its blocks each a compiled region (regional.py).

Dynamo does not trace into it (torch.compiler.disable): the compiled forward breaks there and resumes after it. A
class rather than a closure, so that a model keeps working when it is copied (copy.deepcopy gives the copy a boundary
around the copy's trunk) or pickled whole (torch.save(model)). Imported once torch is (regional.py imports it when it
compiles); regional.BOUNDARY_NAME is its name, without torch, for the compile report, which leaves the graph breaks
Dynamo makes here out (inductor/session.py).
"""

from __future__ import annotations

from typing import Any

import torch


class RegionBoundary:
    """The trunk's own forward, run outside the compiled region around it."""

    def __init__(self, module: Any):
        self.module = module

    @torch.compiler.disable
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return type(self.module).forward(self.module, *args, **kwargs)


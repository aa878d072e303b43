"""What accelerate does with ACCELERATE_USE_FSDP on this machine's devices: each rank prints one line,
`PROBE {"rank": .., "distributed_type": .., "wrapped_as": .., "parameter_types": [..]}`. The toolkit refuses
FSDP through accelerate on CPUs (toolkit sharding.py) because this shows it runs DDP there instead."""

import json
import os

import torch
from accelerate import Accelerator

accelerator = Accelerator()
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
optimizer = torch.optim.AdamW(model.parameters())
model, optimizer = accelerator.prepare(model, optimizer)
wrapped = getattr(model, "_orig_mod", model)   # under torch.compile (ACCELERATE_DYNAMO_BACKEND), what it compiled
report = "PROBE " + json.dumps({"rank": accelerator.process_index,
                                 "distributed_type": str(accelerator.distributed_type),
                                 "wrapped_as": type(wrapped).__name__, "compiled": wrapped is not model,
                                 "parameter_types": sorted({type(p).__name__ for p in model.parameters()})})
# one write of the whole line: the ranks share stdout, and print() writes the text and its newline apart, so two
# ranks' lines could interleave
os.write(1, (report + "\n").encode())

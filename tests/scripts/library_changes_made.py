"""Imports every library the image's changes are made in, then writes what was made in this process (the ledger's
names, from opentc_launcher.patching.made()) and whether the functions the patches and regional compilation replace
are the libraries' own."""

import functools
import json
import os

import accelerate.accelerator
import accelerate.data_loader
import safetensors.torch  # noqa: F401
import torch
import transformers.data.data_collator as data_collator
import transformers.masking_utils as masking_utils
import transformers.trainer  # noqa: F401
from torch.utils.data import DataLoader

from opentc_launcher.patching import made

list(DataLoader(list(range(4)), batch_size=2))   # a DataLoader's iterator, and so its module, at work

with open(os.path.join(os.environ["SM_MODEL_DIR"], "made.json"), "w") as f:
    json.dump({"made": made(),
               "torch_compile_is_torchs": not getattr(torch.compile, "__opentc_patch__", False),
               "compile_regions_is_accelerates": not isinstance(accelerate.accelerator.compile_regions,
                                                                functools.partial),
               "masks_as_installed": not hasattr(masking_utils.create_causal_mask, "__wrapped__"),
               "collator_as_installed": not hasattr(data_collator.torch_default_data_collator, "__wrapped__")}, f)

"""Patches every backend applies for a script of Training Compiler's era: transformers 4.x (a scripts folder whose
requirements.txt pins the transformers of its day) running on the image's accelerate 1.x and torch-xla 2.x.

Each fixes a name or a check the newer library changed under the older one, where no setting of the script avoids
it; each is version-guarded (patching.py) and so does nothing to the image's own transformers 5. The XLA-only
ones (the fp16 device check) are in xla/library_patches.py.
"""

from __future__ import annotations

import inspect
import logging
import os
from types import ModuleType
from typing import Any

from .patching import APPLIES, NOT_NEEDED, Known, LibraryChange, NotNeeded, TargetChanged, arm, source_of
from .replace import replace_once
from .setting_names import option_setting, setting

log = logging.getLogger("opentc_launcher")

UNPATCHED = "a script written for it may fail as it would without the patch"
FALSE = ("0", "FALSE", "OFF", "NO")


# --- accelerate 1.x: the DataLoader arguments transformers 4.34 to 4.39 pass -------------------------------------
# accelerate 1.0 moved Accelerator(split_batches=, dispatch_batches=, even_batches=, use_seedable_sampler=) into a
# DataLoaderConfiguration; transformers 4.34 to 4.39's Trainer still passes them ("Accelerator.__init__() got an
# unexpected keyword argument 'dispatch_batches'"), and declares no upper bound on accelerate. (accelerate 1.x still
# takes split_batches, and ignores it.) The patch takes them as accelerate 0.x did, into a DataLoaderConfiguration,
# so that the image's accelerate (and the XLA patches written for it) serves those Trainers too.
DATALOADER_ARGUMENTS = ("split_batches", "dispatch_batches", "even_batches", "use_seedable_sampler")


def _accept_dataloader_arguments(module: ModuleType) -> None:
    accelerator: Any = getattr(module, "Accelerator", None)
    configuration = getattr(module, "DataLoaderConfiguration", None)
    parameters = inspect.signature(accelerator.__init__).parameters if accelerator else {}
    if configuration is None or "dataloader_config" not in parameters:
        raise TargetChanged("accelerate's Accelerator takes no dataloader_config (a DataLoaderConfiguration)")
    if "dispatch_batches" in parameters:
        raise NotNeeded("accelerate's Accelerator takes the DataLoader arguments itself")
    original = accelerator.__init__
    said: list[bool] = []

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        given = {name: kwargs.pop(name) for name in DATALOADER_ARGUMENTS if name in kwargs}
        given = {name: value for name, value in given.items() if value is not None}
        if given and kwargs.get("dataloader_config") is None:
            kwargs["dataloader_config"] = configuration(**given)
            if not said:
                said.append(True)
                log.info("Accelerator(%s) (transformers 4.34 to 4.39's Trainer) taken as accelerate 1.x takes it, "
                         "in a DataLoaderConfiguration", ", ".join(f"{k}={v!r}" for k, v in given.items()))
        original(self, *args, **kwargs)

    replace_once(accelerator, "__init__", init)


ACCELERATE_DATALOADER_ARGUMENTS = LibraryChange(
    name="accelerate-takes-transformers-4-dataloader-arguments",
    module="accelerate.accelerator",
    target="accelerate.accelerator.Accelerator.__init__",
    why="transformers 4.34 to 4.39's Trainer passes Accelerator() dispatch_batches and split_batches, which "
        "accelerate 1.0 moved into a DataLoaderConfiguration; they are put there",
    apply=_accept_dataloader_arguments,
    unpatched=UNPATCHED,
)


# --- transformers < 4.39: USE_TORCH_XLA ------------------------------------------------------------------------
# transformers before 4.39 takes any installed torch_xla for a TPU (is_torch_tpu_available() makes an XLA device to
# check), whatever USE_TORCH_XLA says: in the xla image a job with the compiler off (or on Inductor) then went down
# the XLA paths ("Invalid device format: cpu" from the fp16 check). Newer transformers read USE_TORCH_XLA, which the
# launcher sets to 0 for every worker that is not on XLA; the patch makes the older ones read it too.

def _honour_use_torch_xla(module: ModuleType) -> None:
    original = getattr(module, "is_torch_tpu_available", None)
    if not callable(original) or getattr(original, "__module__", None) != module.__name__:
        raise NotNeeded(f"{module.__name__} defines no is_torch_tpu_available")
    if "USE_TORCH_XLA" in source_of(module):
        raise NotNeeded("transformers reads USE_TORCH_XLA itself")

    def is_torch_tpu_available(*args: Any, **kwargs: Any) -> bool:   # check_device=True, from 4.17
        if os.environ.get("USE_TORCH_XLA", "1").upper() in FALSE:
            return False
        return bool(original(*args, **kwargs))

    replace_once(module, "is_torch_tpu_available", is_torch_tpu_available)


AWS_NOTEBOOK = "tests/test_aws_examples.py: AWS's GPT-2 notebook (run_clm.py), through train"
TRANSFORMERS_USE_TORCH_XLA = LibraryChange(
    name="transformers-4-reads-use-torch-xla",
    module="transformers.utils.import_utils",
    target="transformers.utils.import_utils.is_torch_tpu_available",
    why="transformers before 4.39 took the installed torch_xla for a TPU whatever USE_TORCH_XLA said, so a job "
        "with the compiler off ran its XLA paths; it reads USE_TORCH_XLA now, as later transformers do",
    apply=_honour_use_torch_xla,
    unpatched=UNPATCHED,
    on_the_images=NOT_NEEDED,
    known=(Known("transformers", ("4.38.0",), APPLIES, AWS_NOTEBOOK),),
)

# Before 4.18 the function lived in transformers.file_utils.
TRANSFORMERS_FILE_UTILS_USE_TORCH_XLA = LibraryChange(
    name="transformers-4-reads-use-torch-xla-in-file-utils",
    module="transformers.file_utils",
    target="transformers.file_utils.is_torch_tpu_available",
    why=TRANSFORMERS_USE_TORCH_XLA.why,
    apply=_honour_use_torch_xla,
    unpatched=UNPATCHED,
    on_the_images=NOT_NEEDED,
)

PATCHES: tuple[LibraryChange, ...] = (ACCELERATE_DATALOADER_ARGUMENTS, TRANSFORMERS_USE_TORCH_XLA,
                                     TRANSFORMERS_FILE_UTILS_USE_TORCH_XLA)
PATCHES_OFF = option_setting("library_patches", "false")


def install(patches: tuple[LibraryChange, ...] = PATCHES) -> list[str]:
    """Arm them (patching.arm), for every backend. Returns the names armed."""
    return arm(patches, "for transformers 4.x scripts", setting(PATCHES_OFF))

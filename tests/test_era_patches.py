"""The patches for scripts of Training Compiler's era (transformers 4.x on the image's accelerate and torch-xla), value
by value, each applied in-process to a stand-in module shaped as the library version it was written for (no
transformers 4.x here: the real ones run in test_aws_examples.py, through `train`, with transformers 4.38)."""

import types

import pytest

from opentc_launcher import era_patches
from opentc_launcher.patching import NotNeeded
from opentc_launcher.xla import library_patches


def accelerate_1x():
    """accelerate.accelerator as 1.x has it: the DataLoader arguments in a DataLoaderConfiguration."""
    module = types.ModuleType("accelerate.accelerator")

    class DataLoaderConfiguration:
        def __init__(self, split_batches=False, dispatch_batches=None, even_batches=True, use_seedable_sampler=False):
            self.given = {"split_batches": split_batches, "dispatch_batches": dispatch_batches,
                          "even_batches": even_batches, "use_seedable_sampler": use_seedable_sampler}

    class Accelerator:
        def __init__(self, device_placement=True, split_batches=None, dataloader_config=None, **kwargs):
            if kwargs:
                raise TypeError(f"Accelerator.__init__() got an unexpected keyword argument {next(iter(kwargs))!r}")
            self.dataloader_config = dataloader_config

    module.Accelerator, module.DataLoaderConfiguration = Accelerator, DataLoaderConfiguration
    return module


def test_transformers_4_dataloader_arguments_reach_accelerate_1_in_a_dataloader_configuration():
    module = accelerate_1x()
    with pytest.raises(TypeError, match="dispatch_batches"):   # what transformers 4.38's Trainer met
        module.Accelerator(dispatch_batches=None, split_batches=False, even_batches=True)
    era_patches.ACCELERATE_DATALOADER_ARGUMENTS.apply(module)
    accelerator = module.Accelerator(dispatch_batches=True, split_batches=True, even_batches=False,
                                     use_seedable_sampler=True)
    assert accelerator.dataloader_config.given == {"split_batches": True, "dispatch_batches": True,
                                                   "even_batches": False, "use_seedable_sampler": True}
    assert module.Accelerator().dataloader_config is None          # nothing given: accelerate's own default
    own = module.DataLoaderConfiguration(even_batches=False)
    assert module.Accelerator(dataloader_config=own).dataloader_config is own   # a script's own wins
    module_before = accelerate_1x()
    era_patches.ACCELERATE_DATALOADER_ARGUMENTS.apply(module_before)
    era_patches.ACCELERATE_DATALOADER_ARGUMENTS.apply(module_before)   # twice: wrapped once
    assert module_before.Accelerator.__init__.__wrapped__.__name__ == "__init__"


def test_an_accelerate_that_takes_the_arguments_itself_is_left_alone():
    module = accelerate_1x()

    class Accelerator:   # accelerate 0.x
        def __init__(self, split_batches=False, dispatch_batches=None, dataloader_config=None):
            pass

    module.Accelerator = Accelerator
    with pytest.raises(NotNeeded, match="takes the DataLoader arguments itself"):
        era_patches.ACCELERATE_DATALOADER_ARGUMENTS.apply(module)


@pytest.mark.parametrize(("use_torch_xla", "expected"), [(None, True), ("1", True), ("true", True), ("0", False),
                                                         ("false", False), ("OFF", False)])
def test_transformers_before_4_39_reads_use_torch_xla(monkeypatch, use_torch_xla, expected):
    module = types.ModuleType("transformers.utils.import_utils")

    def is_torch_tpu_available(check_device=True):
        return True   # torch_xla is installed: all that transformers 4.38 looked at

    is_torch_tpu_available.__module__ = module.__name__
    module.is_torch_tpu_available = is_torch_tpu_available
    era_patches.TRANSFORMERS_USE_TORCH_XLA.apply(module)
    if use_torch_xla is None:
        monkeypatch.delenv("USE_TORCH_XLA", raising=False)
    else:
        monkeypatch.setenv("USE_TORCH_XLA", use_torch_xla)
    assert module.is_torch_tpu_available() is expected


TORCH_XLA_SAYS = {}


def get_xla_device_type(device):
    """transformers 4.38's shape: `xm.xla_real_devices([device])[0].split(":")[0]`; here what torch-xla 2.7 names."""
    return TORCH_XLA_SAYS["name"]


class TrainingArguments:
    def __post_init__(self):
        if get_xla_device_type(self.device) != "GPU" and self.fp16:
            raise ValueError("FP16 Mixed precision training ... can only be used on CUDA devices")


@pytest.mark.parametrize(("torch_xla_says", "transformers_sees"), [("CUDA", "GPU"), ("CPU", "GPU"), ("TPU", "TPU"),
                                                                   (None, None)])
def test_xla_cuda_and_xla_cpu_pass_transformers_4s_fp16_check(torch_xla_says, transformers_sees):
    module = types.ModuleType("transformers.training_args")
    module.get_xla_device_type, module.TrainingArguments = get_xla_device_type, TrainingArguments
    library_patches.TRANSFORMERS_4_XLA_DEVICE_TYPE.apply(module)
    TORCH_XLA_SAYS["name"] = torch_xla_says
    assert module.get_xla_device_type("xla:0") == transformers_sees


def test_transformers_5_has_no_such_check_and_is_left_alone():
    module = types.ModuleType("transformers.training_args")
    module.get_xla_device_type = get_xla_device_type

    class Arguments:   # 4.46 and later: no device check for fp16
        def __post_init__(self):
            pass

    module.TrainingArguments = Arguments
    with pytest.raises(NotNeeded, match="no longer checks"):
        library_patches.TRANSFORMERS_4_XLA_DEVICE_TYPE.apply(module)


def test_a_re_export_of_the_function_is_not_patched_twice():
    """transformers.file_utils re-exports it from 4.18 on (and defines it before): patched where it is defined."""
    module = types.ModuleType("transformers.file_utils")

    def is_torch_tpu_available(check_device=True):
        return True

    is_torch_tpu_available.__module__ = "transformers.utils.import_utils"
    module.is_torch_tpu_available = is_torch_tpu_available
    with pytest.raises(NotNeeded, match="defines no is_torch_tpu_available"):
        era_patches.TRANSFORMERS_FILE_UTILS_USE_TORCH_XLA.apply(module)

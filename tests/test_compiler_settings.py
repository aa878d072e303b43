"""Hyperparameters -> CompilerSettings -> the workers' XLA environment (pure functions)."""

import json

import pytest

from opentc_toolkit.compiler import (
    CompilerSettings,
    compiler_environment,
)
from opentc_toolkit.errors import JobConfigError

ENABLED = "sagemaker_training_compiler_enabled"
DEBUG = "sagemaker_training_compiler_debug_mode"
MULTI = "sagemaker_pytorch_xla_multi_worker_enabled"


def decoded(raw: dict) -> dict:
    """What sagemaker-training makes of hyperparameters.json: JSON-decoded, else the raw string."""
    out = {}
    for k, v in raw.items():
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


@pytest.mark.parametrize("raw,expected", [
    ({}, (False, False, False)),                                                   # absent means off
    ({ENABLED: "true", DEBUG: "false", MULTI: "false"}, (True, False, False)),     # the SDK
    ({ENABLED: "true", DEBUG: "true", MULTI: "true"}, (True, True, True)),
    ({ENABLED: "false"}, (False, False, False)),
    ({ENABLED: '"true"', DEBUG: '"false"'}, (True, False, False)),                 # JSON strings
    ({ENABLED: "True", MULTI: "FALSE"}, (True, False, False)),                     # CreateTrainingJob by hand
])
def test_accepted_values(raw, expected):
    s = CompilerSettings.from_hyperparameters(decoded(raw))
    assert (s.enabled, s.debug, s.multi_worker) == expected


@pytest.mark.parametrize("key,raw", [
    (ENABLED, "yes"), (ENABLED, "1"), (DEBUG, "maybe"), (MULTI, "0"), (ENABLED, ""), (MULTI, "[true]"),
])
def test_rejected_values_name_key_value_and_accepted(key, raw):
    with pytest.raises(JobConfigError) as err:
        CompilerSettings.from_hyperparameters(decoded({key: raw}))
    message = str(err.value)
    assert key in message
    assert repr(json.loads(raw) if raw not in ("yes", "maybe", "") else raw) in message
    assert '"true" or "false"' in message


def test_unknown_compiler_key_is_a_typo_not_silence():
    with pytest.raises(JobConfigError, match="unknown hyperparameter sagemaker_training_compiler_enable:"):
        CompilerSettings.from_hyperparameters({"sagemaker_training_compiler_enable": True})


def test_other_options_are_validated():
    s = CompilerSettings.from_hyperparameters({
        ENABLED: True, "sagemaker_training_compiler_cpu_multi_worker": "Unsynchronized",
        "sagemaker_training_compiler_max_compilations": "12",
        "sagemaker_training_compiler_cache": "false",
        "sagemaker_training_compiler_cache_dir": "/opt/ml/checkpoints/cache"})
    assert (s.cpu_multi_worker, s.max_compilations, s.cache, s.cache_dir) == (
        "unsynchronized", 12, False, "/opt/ml/checkpoints/cache")
    for key, value, accepted in [
        ("sagemaker_training_compiler_cpu_multi_worker", "sync", '"refuse", "unsynchronized"'),
        ("sagemaker_training_compiler_max_compilations", -3, "whole number"),
        ("sagemaker_training_compiler_max_compilations", True, "whole number"),
        ("sagemaker_training_compiler_cache_dir", "relative/path", "absolute folder"),
    ]:
        with pytest.raises(JobConfigError, match=accepted):
            CompilerSettings.from_hyperparameters({key: value})


def env_for(settings, gpus=0, base=None):
    return compiler_environment(settings, gpu_count=gpus, compiler_output="/opt/ml/output/data/compiler",
                                base_env=base or {})


def test_enabled_on_cpu_and_on_gpus():
    on = CompilerSettings(enabled=True)
    assert dict(env_for(on).applied) == {"PJRT_DEVICE": "CPU", "USE_TORCH_XLA": "1"}
    assert dict(env_for(on, gpus=8).applied) == {"PJRT_DEVICE": "CUDA", "USE_TORCH_XLA": "1",
                                                 "GPU_NUM_DEVICES": "8"}


def test_disabled_keeps_transformers_off_xla():
    assert dict(env_for(CompilerSettings(enabled=False)).applied) == {"USE_TORCH_XLA": "0"}
    # debug without the compiler changes nothing
    assert dict(env_for(CompilerSettings(enabled=False, debug=True)).applied) == {"USE_TORCH_XLA": "0"}


def test_debug_puts_every_artefact_under_output_data_compiler():
    applied = env_for(CompilerSettings(enabled=True, debug=True)).applied
    assert applied["PT_XLA_DEBUG_LEVEL"] == "1"
    assert applied["XLA_IR_DEBUG"] == applied["XLA_HLO_DEBUG"] == "1"
    assert applied["XLA_METRICS_FILE"] == "/opt/ml/output/data/compiler/XLA_METRICS_FILE.txt"
    assert applied["XLA_SAVE_TENSORS_FILE"].startswith("/opt/ml/output/data/compiler/")
    assert applied["XLA_FLAGS"] == "--xla_dump_to=/opt/ml/output/data/compiler/xla_dump"


def test_user_set_variables_are_kept_and_reported():
    base = {"PJRT_DEVICE": "CUDA", "XLA_FLAGS": "--xla_gpu_autotune_level=0", "USE_TORCH_XLA": "1"}
    changes = env_for(CompilerSettings(enabled=True, debug=True), base=base)
    assert "PJRT_DEVICE" not in changes.applied and "XLA_FLAGS" not in changes.applied
    assert dict(changes.kept) == {"PJRT_DEVICE": "CUDA", "XLA_FLAGS": "--xla_gpu_autotune_level=0"}
    final = changes.over(base)
    assert final["PJRT_DEVICE"] == "CUDA" and final["XLA_FLAGS"] == "--xla_gpu_autotune_level=0"
    assert final["XLA_METRICS_FILE"].endswith("XLA_METRICS_FILE.txt")

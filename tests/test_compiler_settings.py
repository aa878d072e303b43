"""Hyperparameters -> CompilerSettings -> the workers' environment for the chosen backend (pure functions)."""


import pytest

from opentc_toolkit.compiler import (
    BACKEND,
    CACHE,
    CACHE_DIR,
    CPU_MULTI_WORKER,
    DEBUG,
    ENABLED,
    LIBRARY_PATCHES,
    MAX_COMPILATIONS,
    CompilerSettings,
    compiler_environment,
)
from opentc_toolkit.compiler import MULTI_WORKER as MULTI
from opentc_toolkit.job import decode_hyperparameters as decoded
from opentc_toolkit.not_started import BadInput


@pytest.mark.parametrize(("raw", "expected"), [
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


@pytest.mark.parametrize(("key", "raw", "shown"), [
    (ENABLED, "yes", "'yes'"), (ENABLED, "1", "1"), (DEBUG, "maybe", "'maybe'"), (MULTI, "0", "0"),
    (ENABLED, "", "''"), (MULTI, "[true]", "[True]"), (LIBRARY_PATCHES, "off", "'off'"),
])
def test_rejected_values_name_key_value_and_accepted(key, raw, shown):
    with pytest.raises(BadInput) as err:
        CompilerSettings.from_hyperparameters(decoded({key: raw}))
    assert str(err.value).startswith(f"hyperparameter {key} has the value {shown}, which is not accepted: "
                                     f"use \"true\" or \"false\"")


def test_library_patches_are_on_unless_turned_off():
    assert CompilerSettings.from_hyperparameters({}).library_patches is True
    assert CompilerSettings.from_hyperparameters(decoded({LIBRARY_PATCHES: "false"})).library_patches is False


def test_unknown_compiler_key_is_a_typo_not_silence():
    with pytest.raises(BadInput, match="unknown hyperparameter sagemaker_training_compiler_enable:"):
        CompilerSettings.from_hyperparameters({"sagemaker_training_compiler_enable": True})


def test_other_options_are_validated():
    s = CompilerSettings.from_hyperparameters({
        ENABLED: True, CPU_MULTI_WORKER: "Unsynchronized", MAX_COMPILATIONS: "12", CACHE: "false",
        CACHE_DIR: "/opt/ml/checkpoints/cache"})
    assert (s.cpu_multi_worker, s.max_compilations, s.cache, s.cache_dir) == (
        "unsynchronized", 12, False, "/opt/ml/checkpoints/cache")
    for key, value, accepted in [
        (CPU_MULTI_WORKER, "sync", '"refuse", "unsynchronized"'),
        (MAX_COMPILATIONS, -3, "whole number"),
        (MAX_COMPILATIONS, True, "whole number"),
        (CACHE_DIR, "relative/path", "absolute folder"),
    ]:
        with pytest.raises(BadInput, match=accepted):
            CompilerSettings.from_hyperparameters({key: value})


def env_for(settings, gpus=0, base=None):
    return compiler_environment(settings, gpu_count=gpus, compiler_output="/opt/ml/output/data/compiler",
                                base_env=base or {})


def test_enabled_on_cpu_and_on_gpus():
    # PJRT_DEVICE is not among them: the launch plan decides the device (tests/test_plan.py).
    on = CompilerSettings(enabled=True)
    assert dict(env_for(on).applied) == {"USE_TORCH_XLA": "1"}
    assert dict(env_for(on, gpus=8).applied) == {"USE_TORCH_XLA": "1", "GPU_NUM_DEVICES": "8"}


def test_disabled_keeps_transformers_off_xla():
    assert dict(env_for(CompilerSettings(enabled=False), gpus=8).applied) == {"USE_TORCH_XLA": "0"}
    # debug without the compiler changes nothing
    assert dict(env_for(CompilerSettings(enabled=False, debug=True), gpus=8).applied) == {"USE_TORCH_XLA": "0"}
    # no GPU: accelerate is told to run on the CPU, or several workers would never synchronise (test_distributions)
    on_cpu = {"USE_TORCH_XLA": "0", "ACCELERATE_USE_CPU": "true"}
    assert dict(env_for(CompilerSettings(enabled=False)).applied) == on_cpu


def test_debug_puts_every_artefact_under_output_data_compiler():
    applied = env_for(CompilerSettings(enabled=True, debug=True)).applied
    assert applied["PT_XLA_DEBUG_LEVEL"] == "1"
    assert applied["XLA_IR_DEBUG"] == applied["XLA_HLO_DEBUG"] == "1"
    assert applied["XLA_METRICS_FILE"] == "/opt/ml/output/data/compiler/XLA_METRICS_FILE.txt"
    assert applied["XLA_SAVE_TENSORS_FILE"].startswith("/opt/ml/output/data/compiler/")
    assert applied["XLA_FLAGS"] == "--xla_dump_to=/opt/ml/output/data/compiler/xla_dump"


def test_user_set_variables_are_kept_and_reported():
    base = {"XLA_FLAGS": "--xla_gpu_autotune_level=0", "USE_TORCH_XLA": "1", "GPU_NUM_DEVICES": "2"}
    changes = env_for(CompilerSettings(enabled=True, debug=True), gpus=8, base=base)
    assert not {"XLA_FLAGS", "USE_TORCH_XLA", "GPU_NUM_DEVICES"} & set(changes.applied)
    assert dict(changes.kept) == {"XLA_FLAGS": "--xla_gpu_autotune_level=0", "GPU_NUM_DEVICES": "2"}
    assert changes.applied["XLA_METRICS_FILE"].endswith("XLA_METRICS_FILE.txt")


@pytest.mark.parametrize(("raw", "expected"), [({}, "xla"), ({BACKEND: '"inductor"'}, "inductor"),
                                          ({BACKEND: "XLA"}, "xla"), ({BACKEND: '"Inductor"'}, "inductor")])
def test_the_backend_is_xla_unless_inductor_is_chosen(raw, expected):
    settings = CompilerSettings.from_hyperparameters(decoded({ENABLED: "true", **raw}))
    assert settings.compiler_name == expected and settings.backend_name == expected
    assert CompilerSettings.from_hyperparameters(decoded({ENABLED: "false", **raw})).backend_name == "eager"


@pytest.mark.parametrize("raw", ['"tvm"', '"openxla"', "3", '""'])
def test_an_unknown_backend_names_both_accepted(raw):
    with pytest.raises(BadInput) as err:
        CompilerSettings.from_hyperparameters(decoded({ENABLED: "true", BACKEND: raw}))
    assert str(err.value).startswith(f"hyperparameter {BACKEND} has the value ")
    assert 'use one of "xla", "inductor".' in str(err.value)


def test_inductor_compiles_trainer_and_accelerate_scripts_through_accelerates_variable():
    on = CompilerSettings(enabled=True, compiler_name="inductor")
    assert dict(env_for(on, gpus=8).applied) == {"USE_TORCH_XLA": "0", "ACCELERATE_DYNAMO_BACKEND": "inductor"}
    applied = env_for(CompilerSettings(enabled=True, compiler_name="inductor", debug=True)).applied
    assert applied["TORCH_TRACE"] == "/opt/ml/output/data/compiler/torch_trace"
    assert applied["TORCH_LOGS_OUT"] == "/opt/ml/output/data/compiler/torch_logs.txt"
    assert applied["TORCH_LOGS"] == "graph_breaks,recompiles"
    kept = env_for(on, base={"ACCELERATE_DYNAMO_BACKEND": "aot_eager", "TORCH_LOGS": "+dynamo"})
    assert dict(kept.kept) == {"ACCELERATE_DYNAMO_BACKEND": "aot_eager"}

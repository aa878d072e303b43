"""Hyperparameters -> JobSettings; worker options -> the workers' environment for their backend (pure functions)."""


import pytest

from conftest import launch_context
from opentc_launcher.api import compiler_environment
from opentc_launcher.identity import WorkerIdentity
from opentc_launcher.inductor.trace_report import debug_environment as inductor_debug_environment
from opentc_launcher.options import WorkerOptions
from opentc_launcher.xla.session import xla_runtime_env
from opentc_toolkit.job import decode_hyperparameters as decoded
from opentc_toolkit.job_settings import (
    BACKEND,
    CACHE,
    CACHE_DIR,
    COMPILER_KEYS,
    CPU_MULTI_WORKER,
    DEBUG,
    ENABLED,
    LIBRARY_PATCHES,
    MAX_COMPILATIONS,
    JobSettings,
)
from opentc_toolkit.job_settings import MULTI_WORKER as MULTI
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
    s = JobSettings.from_hyperparameters(decoded(raw))
    assert (s.enabled, s.debug, s.multi_worker) == expected


@pytest.mark.parametrize(("key", "raw", "shown"), [
    (ENABLED, "yes", '"yes"'), (ENABLED, "1", "1"), (DEBUG, "maybe", '"maybe"'), (MULTI, "0", "0"),
    (ENABLED, "", '""'), (MULTI, "[true]", "[true]"), (LIBRARY_PATCHES, "off", '"off"'), (MULTI, '"on"', '"on"'),
])
def test_rejected_values_name_key_value_and_accepted(key, raw, shown):
    with pytest.raises(BadInput) as err:
        JobSettings.from_hyperparameters(decoded({key: raw}))
    assert str(err.value).startswith(f"hyperparameter {key} has the value {shown}, which is not accepted: "
                                     f"use \"true\" or \"false\"")


def test_library_patches_are_on_unless_turned_off():
    assert JobSettings.from_hyperparameters({}).worker.library_patches is True
    assert JobSettings.from_hyperparameters(decoded({LIBRARY_PATCHES: "false"})).worker.library_patches is False


def test_library_patches_off_says_every_library_that_runs_as_installed_torchs_checkpoint_included():
    """Issue 51: the line named transformers and accelerate, not torch's gradient checkpointing on XLA, which the
    same switch leaves failing."""
    from opentc_launcher.registry import backend_named

    notes = backend_named("xla").launch_notes(WorkerOptions(backend="xla", device="cpu", library_patches=False),
                                              launch_context())
    (line,) = [note for note in notes if note.startswith("library patches off")]
    assert line.startswith("library patches off (--library-patches false): accelerate, safetensors, torch, torch_xla "
                           "and transformers run as installed, torch's own included (torch.utils.checkpoint: "
                           "gradient checkpointing fails on XLA"), line


def test_unknown_compiler_key_is_a_typo_not_silence():
    with pytest.raises(BadInput, match="unknown hyperparameter sagemaker_training_compiler_enable:"):
        JobSettings.from_hyperparameters({"sagemaker_training_compiler_enable": True})


def test_other_options_are_validated():
    s = JobSettings.from_hyperparameters({
        ENABLED: True, CPU_MULTI_WORKER: "Unsynchronized", MAX_COMPILATIONS: "12", CACHE: "false",
        CACHE_DIR: "/opt/ml/checkpoints/cache"})
    assert (s.worker.cpu_multi_worker, s.worker.max_compilations, s.cache, s.cache_dir) == (
        "unsynchronized", 12, False, "/opt/ml/checkpoints/cache")
    for key, value, accepted in [
        (CPU_MULTI_WORKER, "sync", '"refuse", "unsynchronized"'),
        (MAX_COMPILATIONS, -3, "whole number"),
        (MAX_COMPILATIONS, True, "whole number"),
        (CACHE_DIR, "relative/path", "absolute folder"),
    ]:
        with pytest.raises(BadInput, match=accepted):
            JobSettings.from_hyperparameters({key: value})


@pytest.mark.parametrize("value", ["²", "7" * 5000, "٣", "-1", "1.5", "1e3"],
                         ids=["superscript", "5000-digits", "arabic-indic", "negative", "fraction", "exponent"])
def test_a_number_hyperparameter_that_is_not_a_plain_whole_number_is_refused_naming_what_is_accepted(value):
    with pytest.raises(BadInput) as refused:
        JobSettings.from_hyperparameters({MAX_COMPILATIONS: value})
    message = str(refused.value)
    assert message.startswith(f"hyperparameter {MAX_COMPILATIONS} has the value "), message
    assert "use a whole number >= 0 in digits 0-9" in message and len(message) < 400, message


def env_for(backend="xla", gpus=0, base=None):
    """The environment for workers with these options (debug mode is not part of it: the session sets its switches
    in the worker's own process, below)."""
    return compiler_environment(WorkerOptions(backend=backend, gpu_count=gpus), launch_context(gpus, env=base))


COMPILER_FOLDER = "/opt/ml/output/data/compiler"   # debug mode's folder in a job (plan.worker_options: test_plan)


def xla_worker_env(base=None, debug=True, rank=0, world=1):
    """What an XLA worker sets in its own process (xla/session.py) for the launch's options on the CPU."""
    identity = WorkerIdentity(rank=rank, local_rank=rank, world_size=world, local_world_size=world)
    options = WorkerOptions(backend="xla", device="cpu", debug_mode=debug, debug_dir=COMPILER_FOLDER)
    return xla_runtime_env(options, identity, base or {})


def test_enabled_on_cpu_and_on_gpus():
    # PJRT_DEVICE is not among them: the launch plan decides the device (tests/test_plan.py).
    # TORCH_WARM_POOL=0: no Inductor compile-worker pool started by torch_xla's import, in every rank
    assert dict(env_for().applied) == {"USE_TORCH_XLA": "1", "TORCH_WARM_POOL": "0"}
    assert dict(env_for(gpus=8).applied) == {"USE_TORCH_XLA": "1", "TORCH_WARM_POOL": "0", "GPU_NUM_DEVICES": "8"}
    assert "TORCH_WARM_POOL" not in env_for(base={"TORCH_WARM_POOL": "1"}).applied   # a user's choice is kept


def test_disabled_keeps_transformers_off_xla():
    assert dict(env_for("eager", gpus=8).applied) == {"USE_TORCH_XLA": "0"}
    # no GPU: accelerate is told to run on the CPU, or several workers would never synchronise (test_distributions)
    on_cpu = {"USE_TORCH_XLA": "0", "ACCELERATE_USE_CPU": "true"}
    assert dict(env_for("eager").applied) == on_cpu


def test_debug_mode_is_a_worker_option_declared_once():
    """Issue 41: its hyperparameter comes from the option's declaration, parsed as a flag like the others."""
    assert DEBUG == "sagemaker_training_compiler_debug_mode" and COMPILER_KEYS.count(DEBUG) == 1
    assert JobSettings.from_hyperparameters({DEBUG: True}).worker.debug_mode is True
    from opentc_launcher.worker import build_parser

    options = WorkerOptions(debug_mode=True, debug_dir=COMPILER_FOLDER)   # it travels on the argv
    assert WorkerOptions.from_namespace(build_parser().parse_args([*options.to_argv(), "train.py"])) == options


def test_debug_puts_every_artefact_under_output_data_compiler():
    """Issue 41: debug mode travels like the backend, on the worker's command line to the backend's session, which
    sets its switches in the worker's own process; the launch's environment has none of them."""
    assert not {"XLA_METRICS_FILE", "XLA_FLAGS"} & set(env_for().applied)
    applied = xla_worker_env().updates
    assert applied["PT_XLA_DEBUG_LEVEL"] == "1"
    assert applied["XLA_IR_DEBUG"] == applied["XLA_HLO_DEBUG"] == "1"
    assert applied["XLA_METRICS_FILE"] == f"{COMPILER_FOLDER}/XLA_METRICS_FILE.txt"
    assert applied["XLA_SAVE_TENSORS_FILE"].startswith(f"{COMPILER_FOLDER}/")
    assert applied["XLA_FLAGS"] == f"--xla_dump_to={COMPILER_FOLDER}/xla_dump"
    assert not {"XLA_METRICS_FILE", "XLA_FLAGS"} & set(xla_worker_env(debug=False).updates)
    # several workers: a file each
    assert xla_worker_env(rank=1, world=2).updates["XLA_METRICS_FILE"].endswith("XLA_METRICS_FILE.txt.rank1")


def test_user_set_variables_are_kept_and_reported():
    base = {"USE_TORCH_XLA": "1", "GPU_NUM_DEVICES": "2"}
    changes = env_for(gpus=8, base=base)
    assert not {"USE_TORCH_XLA", "GPU_NUM_DEVICES"} & set(changes.applied)
    assert dict(changes.kept) == {"GPU_NUM_DEVICES": "2"}
    own = xla_worker_env(base={"XLA_METRICS_FILE": "/mine.txt", "XLA_IR_DEBUG": "1"})
    assert "XLA_METRICS_FILE" not in own.updates and "XLA_IR_DEBUG" not in own.updates
    assert own.kept == ("XLA_METRICS_FILE=/mine.txt: keeping it",)   # the same value needs no word


def test_a_users_xla_flags_get_debug_modes_dump_flag_by_flag():
    """Issue 40 (design review): a user's own XLA_FLAGS was kept whole, and debug mode's --xla_dump_to silently
    dropped. Now the user's flags stay, each, and the flags they do not set are added (and said)."""
    dump = f"--xla_dump_to={COMPILER_FOLDER}/xla_dump"
    theirs = " --xla_gpu_autotune_level=0  --xla_dump_hlo_as_text "
    changes = xla_worker_env(base={"XLA_FLAGS": theirs})
    assert changes.updates["XLA_FLAGS"] == f"--xla_gpu_autotune_level=0  --xla_dump_hlo_as_text {dump}"
    assert changes.kept == (f"XLA_FLAGS={theirs}: keeping it, with {dump} added",)
    own = xla_worker_env(base={"XLA_FLAGS": "--xla_dump_to=/mine"})            # their own dump folder wins
    assert "XLA_FLAGS" not in own.updates and own.kept == ("XLA_FLAGS=--xla_dump_to=/mine: keeping it",)
    off = xla_worker_env(base={"XLA_FLAGS": "--xla_gpu_autotune_level=0"}, debug=False)   # no debug mode
    assert "XLA_FLAGS" not in off.updates and not off.kept


@pytest.mark.parametrize(("raw", "expected"), [({}, "xla"), ({BACKEND: '"inductor"'}, "inductor"),
                                          ({BACKEND: "XLA"}, "xla"), ({BACKEND: '"Inductor"'}, "inductor")])
def test_the_backend_is_xla_unless_inductor_is_chosen(raw, expected):
    settings = JobSettings.from_hyperparameters(decoded({ENABLED: "true", **raw}))
    assert settings.compiler_name == expected and settings.backend_name == expected
    assert JobSettings.from_hyperparameters(decoded({ENABLED: "false", **raw})).backend_name == "eager"


@pytest.mark.parametrize("raw", ['"tvm"', '"openxla"', "3", '""'])
def test_an_unknown_backend_names_both_accepted(raw):
    with pytest.raises(BadInput) as err:
        JobSettings.from_hyperparameters(decoded({ENABLED: "true", BACKEND: raw}))
    assert str(err.value).startswith(f"hyperparameter {BACKEND} has the value ")
    assert 'use one of "xla", "inductor".' in str(err.value)


def test_inductor_compiles_trainer_and_accelerate_scripts_through_accelerates_variable():
    assert dict(env_for("inductor", gpus=8).applied) == {"USE_TORCH_XLA": "0", "ACCELERATE_DYNAMO_BACKEND": "inductor"}
    # debug mode's switches, which the Inductor session sets in the worker's own process before torch is imported
    switches = inductor_debug_environment(COMPILER_FOLDER)
    assert switches["TORCH_TRACE"] == f"{COMPILER_FOLDER}/torch_trace"
    assert switches["TORCH_LOGS_OUT"] == f"{COMPILER_FOLDER}/torch_logs.txt"
    assert switches["TORCH_LOGS"] == "graph_breaks,recompiles"
    kept = env_for("inductor", base={"ACCELERATE_DYNAMO_BACKEND": "aot_eager", "TORCH_LOGS": "+dynamo"})
    assert dict(kept.kept) == {"ACCELERATE_DYNAMO_BACKEND": "aot_eager"}


def launcher_settings():
    """Every Setting the launcher's modules declare (its messages name settings only through these: setting() takes
    nothing else), found by importing each module that makes one."""
    import importlib
    import re
    from pathlib import Path

    from opentc_launcher.setting_names import Setting

    root = Path(__file__).resolve().parent.parent / "launcher" / "src"
    found = {}
    for path in sorted(root.rglob("*.py")):
        if re.search(r"\b(option_setting|Setting)\(", path.read_text(encoding="utf-8")):
            module = importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
            found.update({f"{module.__name__}.{name}": value for name, value in vars(module).items()
                          if isinstance(value, Setting)})
    assert len(found) >= 9, found
    return found


def test_every_setting_the_launcher_names_is_worded_as_a_hyperparameter():
    """Started by the toolkit, each setting a launcher message names is a hyperparameter or debug mode: none falls back
    to the launcher's own option. (The toolkit's words are made from the launcher's constants and the declarations,
    so none can name a setting the launcher does not have.)"""
    from opentc_launcher.setting_names import setting
    from opentc_toolkit.plan import with_setting_names

    settings = launcher_settings()
    env = with_setting_names({}, JobSettings())
    untranslated = {name: s.words for name, s in settings.items() if not setting(s, env).startswith(
        ("hyperparameter sagemaker_", "sagemaker_", "debug mode (sagemaker_"))}
    assert untranslated == {}


@pytest.mark.parametrize(("option", "value", "worded"), [
    ("library_patches", "false", f"{LIBRARY_PATCHES}=false"),             # a flag, as the SDK writes it
    ("cpu_multi_worker", "unsynchronized", f'{CPU_MULTI_WORKER}="unsynchronized"'),
    ("max_compilations", None, f"hyperparameter {MAX_COMPILATIONS}"),    # the setting itself
])
def test_a_worker_option_is_worded_by_its_hyperparameter(option, value, worded):
    from opentc_launcher.setting_names import option_setting, setting
    from opentc_toolkit.plan import with_setting_names

    named = option_setting(option, value)
    assert setting(named, with_setting_names({}, JobSettings())) == worded
    assert setting(named, {}) == f"--{option.replace('_', '-')}" + (f" {value}" if value else "")   # opentc-run


def test_a_setting_of_an_option_that_does_not_exist_is_refused_where_it_is_declared():
    from opentc_launcher.setting_names import option_setting

    with pytest.raises(ValueError, match="'library_patch' is not a worker option"):
        option_setting("library_patch", "false")


def test_each_worker_setting_is_declared_once_with_its_key_default_and_option():
    """A worker option declared with a setting (opentc_launcher.options) is a hyperparameter of the compiler's
    namespace, read with the option's default, and an opentc-run/opentc-worker option: nothing else declares it."""
    import argparse

    from opentc_launcher.options import add_worker_arguments, settable_options
    from opentc_launcher.registry import BACKEND_DEFAULTS
    from opentc_toolkit.job_settings import COMPILER_KEYS, WORKER_SETTINGS

    parser = argparse.ArgumentParser()
    add_worker_arguments(parser, BACKEND_DEFAULTS)
    read = JobSettings.from_hyperparameters({})
    declared = settable_options()
    assert {name for name, _, _ in declared} == {"debug_mode", "cpu_multi_worker", "max_compilations", "warmup_steps",
                                                "library_patches", "defaults_off", "compile_progress_seconds"}
    for name, _, default in declared:
        assert WORKER_SETTINGS[name] == f"sagemaker_training_compiler_{name}" and WORKER_SETTINGS[name] in COMPILER_KEYS
        assert getattr(read.worker, name) == default, name
        assert parser.parse_args([]).__dict__[name] == default, name


@pytest.mark.parametrize(("value", "expected"), [
    ("abc", '"abc"'), (3, "3"), (True, "true"), (None, "null"), (["a"], '["a"]'), ("café", '"café"'),
    ("\udcff", '"\\udcff"'),                                                    # not UTF-8: escaped, never raised
    ("7" * 5000, '"' + "7" * 39 + "... (5000 characters)"),                    # what is accepted stays in view
    pytest.param(10 ** 5000, "(a number too large to show)", id="past-the-int-to-text-limit"),
])
def test_a_hyperparameters_value_is_quoted_as_json_the_way_the_sdk_writes_it(value, expected):
    from opentc_toolkit.quoted import quoted

    assert quoted(value) == expected

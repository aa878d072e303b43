"""The Inductor backend's compile-time defaults in real jobs on CPU, through the real `train` (real Inductor and
g++, real accelerate and Trainer): each switched off by name, the user's own setting kept, what each default
promises checked where it shows (tests/test_inductor.py checks them on, in its jobs), and losses equal to eager's.

Nothing is mocked. The one stand-in is a C++ compiler that cannot build AVX code (a wrapper around g++ that refuses
-mavx* flags), the case the vector check's proof exists for.
"""

import json
import stat

import pytest

from conftest import run_train
from opentc_launcher import exit_codes
from opentc_launcher.inductor.vec_isa import PROOF_FILE

pytestmark = [pytest.mark.slow, pytest.mark.inductor]

DEFAULTS_OFF = "sagemaker_training_compiler_defaults_off"
RELATIVE_TOLERANCE = 0.02   # as tests/test_inductor.py: Inductor's fused kernels against eager, in float rounding
TRAINER = {"max_steps": 6, "per_device_train_batch_size": 4, "learning_rate": 0.003, "logging_steps": 2,
           "save_strategy": "no", "report_to": "none", "optim": "adamw_torch", "dataloader_drop_last": True,
           "block_size": 64, "seed": 0}


def inductor_job(make_job, script, cache=None, **hyperparameters):
    job = make_job(script=script, sagemaker_training_compiler_backend="inductor", **hyperparameters)
    if cache is not None:
        job.set_hyperparameters(sagemaker_training_compiler_cache_dir=str(cache))
    return job


def published(cache):
    folders = sorted(cache.glob("inductor-torch-*"))
    assert len(folders) == 1, folders
    return folders[0]


def assert_same_losses(eager, compiled):
    assert len(eager) == len(compiled) >= 2, (eager, compiled)
    for e, c in zip(eager, compiled, strict=True):
        assert c == pytest.approx(e, rel=RELATIVE_TOLERANCE), (eager, compiled)


def test_with_every_default_off_the_trainer_compiles_the_whole_model_as_before(make_job, tmp_path):
    """The Trainer with sagemaker_training_compiler_defaults_off="all": nothing set, nothing patched, nothing kept in
    the cache folder; the model compiled whole, with the logger call in transformers' loss breaking the graph."""
    eager = make_job(script="run_clm_tiny.py", sagemaker_training_compiler_enabled=False, **TRAINER)
    eager.set_hyperparameters(output_dir=str(eager.model))
    assert run_train(eager).returncode == 0
    cache = tmp_path / "cache"
    job = inductor_job(make_job, "run_clm_tiny.py", cache=cache, **TRAINER, **{DEFAULTS_OFF: "all"})
    job.set_hyperparameters(output_dir=str(job.model))
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    report = job.compile_report()
    off = f"off (hyperparameter {DEFAULTS_OFF})"
    assert report["compile_time_defaults"] == dict.fromkeys(
        ["regional", "head", "vec_isa", "job_id", "logging", "warm_start", "progress"], off)
    assert "regional compilation:" not in result.output
    assert report["graphs_captured"] >= 2, report                        # whole, and broken where it logs
    assert any("Logger" in b["reason"] or "logging" in b["reason"] for b in report["graph_breaks"]), report
    folder = published(cache)
    assert not (folder / PROOF_FILE).exists() and not (folder / "dynamo").exists(), sorted(folder.iterdir())
    assert_same_losses(eager.read_json("output/data/trainer_metrics.json")["losses"],
                       job.read_json("output/data/trainer_metrics.json")["losses"])


def test_a_users_own_regional_compilation_is_kept_and_its_per_layer_recompiles_named(make_job, tmp_path):
    """ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=true set by the user: accelerate's own compile_regions runs as
    installed, and the GPT-2 of the Accelerate loop (use_cache on) recompiles its block once per layer. The report
    names the cause and both fixes; the job still trains as eager does. (It does not save: accelerate's own
    regional compilation hands unwrap_model a copy whose compiled children rename the state_dict, and
    save_pretrained then fails on GPT-2's tied weights, which is why the backend compiles blocks in place.)"""
    common = {"max_steps": 6, "logging_steps": 2, "save": "no"}
    eager = make_job(script="accelerate_clm.py", sagemaker_training_compiler_enabled=False, **common)
    assert run_train(eager).returncode == 0
    job = inductor_job(make_job, "accelerate_clm.py", cache=tmp_path / "cache", **common)
    result = run_train(job, ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION="true")
    assert result.returncode == 0, result.output[-5000:]
    report = job.compile_report()
    assert report["compile_time_defaults"]["regional"] == \
        "the user's ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=true kept"
    assert "regional compilation:" not in result.output                # accelerate's own, not refined
    finding = next(f for f in report["findings"] if "was compiled again for each layer" in f["problem"])
    assert "model.config.use_cache = False" in finding["fix"], finding
    assert "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=false" in finding["fix"], finding
    assert "was compiled again for each layer" in result.output          # in the log, with the fix
    assert_same_losses(eager.read_json("output/data/accelerate_metrics.json")["losses"],
                       job.read_json("output/data/accelerate_metrics.json")["losses"])


def test_a_shape_profile_lets_a_job_of_the_same_lineage_skip_what_the_last_one_learnt(make_job, tmp_path):
    """The batch size varies and comes in another order in the next job (LOOP_ORDER, not an argument: the
    lineage is the same). With the profile Dynamo kept (TORCH_COMPILE_JOB_ID) the next job compiles the dynamic
    graph at once and finds it in the cache; without it, it compiles a static graph for its first size first. The
    same job folder every time: torch knows code by its file's path, and a SageMaker job's is always
    /opt/ml/code."""
    cache = tmp_path / "cache"
    job = inductor_job(make_job, "compile/inductor_loop.py", cache=cache, shapes="varying", steps=6)
    assert run_train(job).returncode == 0
    cold = job.compile_report()
    assert cold["graphs_captured"] == 2, cold                           # static for 8 rows, then dynamic
    assert cold["compile_time_defaults"]["job_id"].startswith("on: TORCH_COMPILE_JOB_ID=opentc-"), cold
    assert list((published(cache) / "dynamo").glob("code_state_opentc-*.pkl"))

    job.set_hyperparameters(**{DEFAULTS_OFF: "job_id"})
    assert run_train(job, LOOP_ORDER="down").returncode == 0
    unprofiled = job.compile_report()
    assert unprofiled["graphs_captured"] == 2 and unprofiled["graphs_compiled"] >= 1, unprofiled

    job.set_hyperparameters(**{DEFAULTS_OFF: ""})
    result = run_train(job, LOOP_ORDER="down")
    assert result.returncode == 0
    profiled = job.compile_report()
    assert profiled["graphs_captured"] == 1 and profiled["graphs_compiled"] == 0, profiled
    assert profiled["persistent_cache"]["hits"] >= 1, profiled
    # The cold job's proof holds here: torch's list of the vector sets was asked from Dynamo's import (the venv's
    # torch 2.7 imports its cache code with Dynamo), not inside the first compilation.
    assert "for torch's list of the vector sets, asked from Dynamo's import" in result.output, result.output[-3000:]


@pytest.fixture
def compiler_without_avx(tmp_path):
    """g++, except that it fails on any -mavx* flag: a compiler that cannot build what the CPU reports."""
    wrapper = tmp_path / "bin" / "g++-without-avx"
    wrapper.parent.mkdir()
    wrapper.write_text('#!/bin/sh\nfor arg in "$@"; do case "$arg" in -mavx*) echo "no AVX here" >&2; exit 1;; '
                       'esac; done\nexec g++ "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def test_the_vector_check_is_skipped_only_where_the_compiler_proved_it_can_build_what_the_cpu_reports(
        make_job, tmp_path, compiler_without_avx):
    """With a compiler that cannot build AVX code, torch's check fails the sets the CPU reports: the proof says so,
    the job falls back to code without them and trains, the next job keeps checking (and still finds the first
    one's kernels). Skipping the check anyway (the user's TORCHINDUCTOR_VEC_ISA_OK=1) would fail the job."""
    cache = tmp_path / "cache"
    reports = []
    for _ in range(2):
        job = inductor_job(make_job, "compile/inductor_loop.py", cache=cache)
        result = run_train(job, CXX=compiler_without_avx)
        assert result.returncode == 0, result.output[-5000:]
        reports.append(job.compile_report())
    proof = json.loads((published(cache) / PROOF_FILE).read_text())
    assert proof["proven"] is False and proof["key"]["compiler"].startswith(compiler_without_avx), proof
    assert not any(isa.startswith("avx") for isa in proof["passed"]), proof
    first, second = reports
    assert first["compile_time_defaults"]["vec_isa"] == "not used: a set the CPU reports failed torch's check"
    assert second["compile_time_defaults"]["vec_isa"].startswith("not used: a set the CPU reports failed torch's "
                                                                 "check here, so it keeps checking")
    assert second["graphs_compiled"] == 0 and second["persistent_cache"]["hits"] >= 2, second

    if not proof["reported"]:
        pytest.skip("this CPU reports no vector instruction set: nothing to skip the check for")
    forced = inductor_job(make_job, "compile/inductor_loop.py", cache=tmp_path / "forced")
    result = run_train(forced, CXX=compiler_without_avx, TORCHINDUCTOR_VEC_ISA_OK="1")
    assert result.returncode == exit_codes.FAILED, result.output[-3000:]
    assert "no AVX here" in result.output

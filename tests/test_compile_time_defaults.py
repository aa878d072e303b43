"""The Inductor backend's compile-time defaults, their names and switches, in pure functions and one worker's
environment (no compilation here: tests/test_compile_time.py runs them in real jobs).

The recompile reasons below are Dynamo's own words, copied from runs of accelerate's compile_regions on a GPT-2
with use_cache=True on torch 2.7 and 2.14 (docs/compile-time.md)."""

import json
import sys

import pytest

from conftest import launch_context
from opentc_launcher.backend import LaunchRefused
from opentc_launcher.decision import decide
from opentc_launcher.identity import WorkerIdentity
from opentc_launcher.inductor import vec_isa
from opentc_launcher.inductor.compile_time import OPTIONAL_DEFAULTS, CompileTimeDefaults, lineage_id
from opentc_launcher.inductor.per_layer import per_layer_finding
from opentc_launcher.options import WorkerOptions, off_names
from opentc_launcher.script import Program
from opentc_toolkit.job import decode_hyperparameters
from opentc_toolkit.job_settings import DEFAULTS_OFF, JobSettings
from opentc_toolkit.not_started import BadInput
from opentc_toolkit.plan import with_setting_names

ONE = WorkerIdentity(rank=0, local_rank=0, world_size=1, local_world_size=1)


@pytest.fixture(autouse=True)
def torch_compile_kept(monkeypatch):
    """configure() patches torch.compile for regional compilation where torch is imported already (in a worker);
    pytest's own torch.compile is put back after each test."""
    import torch

    monkeypatch.setattr(torch, "compile", torch.compile)


def test_names_are_read_leniently_and_once():
    assert off_names(" Regional, vec-isa,,regional ") == ("regional", "vec_isa")
    assert off_names("") == ()
    options = WorkerOptions(backend="inductor", defaults_off="vec-isa")
    assert options.is_off("vec_isa") and not options.is_off("regional")
    assert all(WorkerOptions(backend="inductor", defaults_off="all").is_off(name) for name in OPTIONAL_DEFAULTS)


ACCEPTED = ("accepts the compile-time defaults to leave off, comma-separated: progress, regional, head, vec_isa, "
            "job_id, logging, warm_start, or all; ")


@pytest.mark.parametrize("backend", ["inductor", "xla", "eager"])
def test_a_name_gets_the_same_answer_on_every_backend(backend):
    """Issue 31 D: a name some backend has is accepted on every backend (it does nothing where that backend is not
    the one running), "all" too; a name no backend has is refused on every backend."""
    for names in ("regional", "all", "regional,vec-isa", ""):
        decided = decide(WorkerOptions(backend=backend, device="cpu", defaults_off=names), launch_context())
        assert decided.defaults_off == names
    with pytest.raises(LaunchRefused) as refused:
        decide(WorkerOptions(backend=backend, device="cpu", defaults_off="regional,fast"), launch_context())
    assert str(refused.value) == (f"--defaults-off {ACCEPTED}it names 'fast', which no backend has (the value: "
                                  f"'regional,fast').")


def test_a_refusal_quotes_a_bounded_part_of_the_value_after_what_is_accepted():
    """Issue 31 C: 5,000 unknown names once made a 59,110-character failure with what is accepted at its end."""
    names = ",".join(f"name{i}" for i in range(5000))
    with pytest.raises(BadInput) as refused:
        JobSettings.from_hyperparameters({DEFAULTS_OFF: names})
    message = str(refused.value)
    assert message.startswith(f"hyperparameter {DEFAULTS_OFF} {ACCEPTED}it names 'name0', 'name1', "), message
    assert " and 4993 more, which no backend has (the value: 'name0,name1," in message
    assert len(message) < 400 and f"({len(names)} characters))." in message


@pytest.mark.parametrize("compiler", [{"sagemaker_training_compiler_enabled": False},
                                      {"sagemaker_training_compiler_enabled": True,
                                       "sagemaker_training_compiler_backend": "xla"},
                                      {"sagemaker_training_compiler_enabled": True,
                                       "sagemaker_training_compiler_backend": "inductor"}])
def test_the_hyperparameter_is_checked_with_any_compiler_and_with_none(compiler):
    with pytest.raises(BadInput, match=f"^hyperparameter {DEFAULTS_OFF} accepts the compile-time defaults"):
        JobSettings.from_hyperparameters({**compiler, DEFAULTS_OFF: "fast"})
    assert JobSettings.from_hyperparameters({**compiler, DEFAULTS_OFF: "Regional"}).worker.defaults_off == "regional"


def test_the_hyperparameter_is_named_in_a_sagemaker_job():
    settings = JobSettings.from_hyperparameters(decode_hyperparameters(
        {DEFAULTS_OFF: '"vec_isa, Job-Id"'}))
    assert settings.worker.defaults_off == "vec_isa,job_id"
    listed = JobSettings.from_hyperparameters(decode_hyperparameters({DEFAULTS_OFF: '["regional"]'}))
    assert listed.worker.defaults_off == "regional"
    with pytest.raises(LaunchRefused, match=f"^hyperparameter {DEFAULTS_OFF} accepts the compile-time defaults"):
        decide(WorkerOptions(backend="inductor", device="cpu", defaults_off="fast"),
               launch_context(env=with_setting_names({}, settings)))
    with pytest.raises(BadInput, match=f"hyperparameter {DEFAULTS_OFF} has the value 3, which is not accepted"):
        JobSettings.from_hyperparameters(decode_hyperparameters({DEFAULTS_OFF: "3"}))


def test_the_lineage_id_is_the_same_for_a_rerun_and_another_for_anything_else(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('v1')\n")
    base = lineage_id(Program(str(script), ("--lr", "0.1")), 2, "cpu")
    assert base == lineage_id(Program(str(script), ("--lr", "0.1")), 2, "cpu")
    assert base.startswith("opentc-") and ":" not in base           # torch reserves "mast:" ids
    others = {lineage_id(Program(str(script), ("--lr", "0.2")), 2, "cpu"),
              lineage_id(Program(str(script), ("--lr", "0.1")), 4, "cpu"),
              lineage_id(Program(str(script), ("--lr", "0.1")), 2, "cuda")}
    script.write_text("print('v2')\n")
    others.add(lineage_id(Program(str(script), ("--lr", "0.1")), 2, "cpu"))
    assert base not in others and len(others) == 4


def configured(tmp_path, environ, **options):
    defaults = CompileTimeDefaults(WorkerOptions(backend="inductor", **{"device": "cpu", **options}), "rank0")
    script = tmp_path / "train.py"
    script.write_text("")
    defaults.configure(environ, ONE, Program(str(script)), environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
    return defaults


def test_each_default_sets_its_variable_and_keeps_the_users(tmp_path):
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    defaults = configured(tmp_path, environ)
    assert environ["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] == "true"
    assert environ["TORCH_COMPILE_JOB_ID"].startswith("opentc-")
    assert environ["TORCH_WARM_POOL"] == "0"                        # on a CPU
    assert "TORCHINDUCTOR_VEC_ISA_OK" not in environ                # no proof yet: torch's check runs, once
    assert defaults.state["vec_isa"].startswith("on: torch's check runs once")
    assert all(defaults.state[name].startswith("on") for name in OPTIONAL_DEFAULTS), defaults.state

    users = {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "false", "TORCH_COMPILE_JOB_ID": "mine",
             "TORCHINDUCTOR_VEC_ISA_OK": "0", "TORCH_WARM_POOL": "1",
             "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    environ = dict(users)
    defaults = configured(tmp_path, environ)
    assert environ == users
    assert defaults.state["regional"] == "the user's ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=false kept"
    assert defaults.state["head"] == "not used: accelerate's own regional compilation runs (the user's variable)"
    assert defaults.state["job_id"] == "the user's TORCH_COMPILE_JOB_ID=mine kept"
    assert defaults.state["vec_isa"] == "the user's TORCHINDUCTOR_VEC_ISA_OK=0 kept"
    assert defaults.state["warm_start"].startswith("the user's TORCH_WARM_POOL=1 kept")
    assert defaults.whole_model_words() == "compile the whole model (ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=false)"


def test_defaults_left_off_set_nothing(tmp_path):
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    defaults = configured(tmp_path, environ, defaults_off="all")
    assert environ == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    assert set(defaults.state.values()) == {"off (--defaults-off)"}
    environ = {}
    configured(tmp_path, environ, defaults_off="regional,job_id")
    assert "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION" not in environ and "TORCH_COMPILE_JOB_ID" not in environ


def test_the_vector_check_is_skipped_only_on_a_proof_for_this_machine(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    key = vec_isa.machine_key({"PATH": "/usr/bin:/bin"})
    proof = {"key": key, "reported": ["avx512", "avx2"], "passed": ["avx512", "avx2"], "proven": True}
    (cache / vec_isa.PROOF_FILE).write_text(json.dumps(proof))
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    assert configured(tmp_path, environ).state["vec_isa"].startswith("on: TORCHINDUCTOR_VEC_ISA_OK=1 (proven")
    assert environ["TORCHINDUCTOR_VEC_ISA_OK"] == "1"

    for other in ({**key, "cpu": "x86_64 0000000000000000"}, {**key, "torch": "0.0.1"},
                  {**key, "compiler": "/opt/other/g++ (1 bytes)"}):
        (cache / vec_isa.PROOF_FILE).write_text(json.dumps({**proof, "key": other}))
        environ = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
        configured(tmp_path, environ)
        assert "TORCHINDUCTOR_VEC_ISA_OK" not in environ, other      # another machine: torch checks

    (cache / vec_isa.PROOF_FILE).write_text(json.dumps({**proof, "passed": ["avx2"], "proven": False}))
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    assert configured(tmp_path, environ).state["vec_isa"].startswith("not used: a set the CPU reports failed")
    assert "TORCHINDUCTOR_VEC_ISA_OK" not in environ

    assert configured(tmp_path, {}).state["vec_isa"] == "not used: no cache folder to keep the check's proof in"
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(cache)}
    gpu = configured(tmp_path, environ, device="cuda")
    assert gpu.state["vec_isa"] == "not needed: no CPU kernels on cuda"
    assert "TORCH_WARM_POOL" not in environ                           # cores to spare: torch's own warm-up
    assert gpu.state["warm_start"] == ("on: torch's source hashes kept per installation in the cache folder; torch's "
                                       "own warm-up of its compile workers stays on cuda")
    assert configured(tmp_path, {}, device="cuda").state["warm_start"] == (
        "not needed: torch's own warm-up of its compile workers stays on cuda, and there is no cache folder to keep "
        "hashes in")


@pytest.mark.parametrize("content", [
    "[" * 100_000 + "]" * 100_000,                                        # nested past the recursion limit
    "{\"key\": KEY}",                                                     # no "proven": not "a set that failed"
    "{\"key\": KEY, \"proven\": \"yes\"}",
    "not json", "\"a string\"", "",
    "{\"key\": KEY, \"proven\": true, \"pad\": \"" + "x" * 70_000 + "\"}",  # larger than any proof
], ids=["nested", "no-proven", "proven-text", "not-json", "a-string", "empty", "too-large"])
def test_a_proof_file_that_is_not_a_proof_is_proved_anew(tmp_path, content):
    """Issue 31 E: the proof comes back from S3 with the cache folder: a file of another shape is treated as no proof
    (torch's check runs at the first compilation and writes a good one), never as a failed check or a crash."""
    cache = tmp_path / "cache"
    cache.mkdir()
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    key = json.dumps(vec_isa.machine_key(environ))
    (cache / vec_isa.PROOF_FILE).write_text(content.replace("KEY", key))
    assert vec_isa.proven(str(cache), vec_isa.machine_key(environ)) is None
    state = configured(tmp_path, environ).state["vec_isa"]
    assert state == "on: torch's check runs once, in the background from the job's start, and its proof is kept", \
        state
    assert "TORCHINDUCTOR_VEC_ISA_OK" not in environ


def fake_prover(*lines):
    """A stand-in for the background check's process (torch's real check runs in tests/test_inductor.py's jobs):
    the Python lines it runs."""
    return [sys.executable, "-c", "\n".join(lines)]


def test_a_background_check_that_does_not_finish_is_stopped_and_said(tmp_path):
    stuck = vec_isa.Prover(str(tmp_path), {}, fake_prover("import time", "time.sleep(600)"))
    child = stuck.child
    assert stuck.wait(timeout=0.5) == "it did not finish within 0.5 s"
    assert child.returncode is not None and stuck.child is None         # killed and reaped, not left behind
    failed = vec_isa.Prover(str(tmp_path), {}, fake_prover("raise SystemExit(3)"))
    assert failed.wait(timeout=60) == "it ended with exit code 3"


def test_the_first_compilation_takes_the_background_checks_proof(tmp_path, monkeypatch):
    """Local rank 0's prover writes the proof; the worker's first compilation waits for it and skips torch's check
    for the rest of the process (config.cpp.vec_isa_ok, put back after the test)."""
    from torch._inductor import config

    monkeypatch.setattr(config.cpp, "vec_isa_ok", None)
    cache = tmp_path / "cache"
    cache.mkdir()
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    defaults = configured(tmp_path, environ, defaults_off="logging")   # Dynamo's config stays as it is
    proof = {"key": vec_isa.machine_key(environ), "reported": ["avx2"], "passed": ["avx2"], "proven": True}
    defaults._prover = vec_isa.Prover(str(cache), environ, fake_prover(
        "import json, sys, time", "time.sleep(0.5)", f"open({vec_isa.PROOF_FILE!r}, 'w').write({json.dumps(proof)!r})"))
    defaults.at_first_compile()
    assert config.cpp.vec_isa_ok is True
    assert defaults.state["vec_isa"] == "on: proven in the background, the proof kept for later jobs"


def test_a_check_that_could_not_start_runs_at_the_first_compilation_without_waiting(tmp_path, monkeypatch):
    """Local rank 0 whose background check did not start (its folder is not there yet) runs torch's check itself at
    its first compilation, at once: no other worker is proving it. torch's check is stood in for here (it builds and
    loads real libraries: tests/test_compile_time.py runs it in real jobs)."""
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "not-yet"), "PATH": "/usr/bin:/bin"}
    defaults = configured(tmp_path, environ, defaults_off="logging")
    defaults.begin(environ)
    assert defaults._prover is None
    checked = []
    monkeypatch.setattr(vec_isa, "prove", lambda folder, key: checked.append(folder) or True)
    monkeypatch.setattr(vec_isa, "wait_for_proof", lambda *a, **k: pytest.fail("rank 0 waited for a proof"))
    defaults.at_first_compile()
    assert checked == [str(tmp_path / "not-yet")]
    assert defaults.state["vec_isa"] == "on: proven at the first compilation, the proof kept for later jobs"


@pytest.mark.parametrize("probe", [
    'import torch\nfrom ctypes import cdll\ncdll.LoadLibrary("PATH")\n',              # torch 2.7's
    'import sys\nfrom ctypes import cdll\ntry:\n    cdll.LoadLibrary("PATH")\nexcept OSError:\n'
    '    import torch  # noqa: F401\n    cdll.LoadLibrary("PATH")\n',                    # torch 2.14's
], ids=["torch 2.7", "torch 2.14"])
def test_the_background_check_loads_each_test_library_in_its_own_process(tmp_path, monkeypatch, probe):
    """torch's probe (a `python -c` that loads the set's test library) runs in the prover's process, which imported
    torch already; a library that does not load is the probe's failure, as the child's exit would be."""
    import ctypes.util
    import subprocess

    from opentc_launcher.inductor import vec_isa_prover

    module = type(sys)("a_torch_module")
    vec_isa_prover.loads_here(module)
    libm, missing = ctypes.util.find_library("m"), str(tmp_path / "missing.so")
    with monkeypatch.context() as no_children:
        no_children.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("the probe started a process"))
        assert module.subprocess.run([sys.executable, "-c", probe.replace("PATH", libm)], check=True).returncode == 0
        assert module.subprocess.check_call([sys.executable, "-c", probe.replace("PATH", libm)]) == 0
        with pytest.raises(subprocess.CalledProcessError):
            module.subprocess.run([sys.executable, "-c", probe.replace("PATH", missing)], check=True)
        with pytest.raises(subprocess.CalledProcessError):
            module.subprocess.check_call([sys.executable, "-c", probe.replace("PATH", missing)])
    # Anything else still runs as a process: g++, another command.
    done = module.subprocess.run([sys.executable, "-c", "print('child')"], stdout=module.subprocess.PIPE, text=True)
    assert done.stdout == "child\n" and module.subprocess.DEVNULL == subprocess.DEVNULL


def test_the_sets_reported_leave_no_memoized_answer_to_skip_the_check_with(tmp_path, monkeypatch):
    """Listing the sets the CPU reports asks each with the check skipped; torch's AMX set (and 2.14's AVX-512 VNNI)
    memoize their answer, which the check would then reuse instead of building their code: the listing forgets it.
    torch's real sets on this CPU (a CPU that reports none that memoize has nothing to show)."""
    from torch._inductor import config, cpu_vec_isa

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))      # AMX's own code is built there
    sets = vec_isa._reported_sets(config, cpu_vec_isa)
    memoized = [vars(cls)["__bool__"] for cls in {cls for isa in sets for cls in type(isa).__mro__}
                if hasattr(vars(cls).get("__bool__"), "cache_info")]
    if not memoized:
        pytest.skip("this CPU reports no set whose answer torch memoizes")
    assert [f.cache_info().currsize for f in memoized] == [0] * len(memoized), [str(isa) for isa in sets]


@pytest.fixture
def torchs_vector_answers_forgotten():
    """torch's memoized list of the sets and each set's memoized answer, forgotten after the test as before it (the
    test process's later compilations ask torch anew)."""
    from torch._inductor import config, cpu_vec_isa

    def forget():
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        vec_isa._reported_sets(config, cpu_vec_isa)      # forgets each set's memoized answer
    forget()
    yield cpu_vec_isa
    forget()


def test_a_proven_job_asks_torchs_list_of_the_sets_from_dynamos_import(tmp_path, monkeypatch,
                                                                      torchs_vector_answers_forgotten):
    """With the check skipped, torch still builds and loads some sets' test libraries in every process (2.7's AMX: a
    fresh Python that imports torch). A job whose proof holds asks torch's list in a thread from Dynamo's import; the
    first compilation takes its answer, so that asking again starts no process. torch's real list on this CPU."""
    import subprocess

    import torch._dynamo  # the worker asks from Dynamo's import; torch 2.7's imports these with it
    import torch._inductor.codecache  # noqa: F401
    from torch._inductor import config

    cpu_vec_isa = torchs_vector_answers_forgotten
    monkeypatch.setattr(config.cpp, "vec_isa_ok", True)             # what TORCHINDUCTOR_VEC_ISA_OK=1 set at import
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch"))
    cache = tmp_path / "cache"
    cache.mkdir()
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"}
    proof = {"key": vec_isa.machine_key(environ), "reported": ["avx2"], "passed": ["avx2"], "proven": True}
    (cache / vec_isa.PROOF_FILE).write_text(json.dumps(proof))
    defaults = configured(tmp_path, environ, defaults_off="logging")
    defaults.dynamo_imported()
    assert defaults._asked is not None
    defaults.at_first_compile()
    assert defaults._asked.seconds is not None and defaults._asked.problem is None
    assert cpu_vec_isa.valid_vec_isa_list.cache_info().currsize == 1
    reported = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]
    with monkeypatch.context() as no_children:
        no_children.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("torch's list started a process"))
        assert [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()] == reported

    # Without a proof (a cold job: its prover proves at the first compilation), nothing is asked ahead.
    cold = configured(tmp_path, {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cold"), "PATH": "/usr/bin:/bin"},
                      defaults_off="logging")
    cold.dynamo_imported()
    assert cold._asked is None


def test_torchs_list_is_not_asked_ahead_before_what_it_uses_is_imported(monkeypatch):
    """Asked in a thread, torch's list must import nothing there (an import beside the script's own could meet them in
    a cycle of module locks): where its modules are not imported yet, it is not asked ahead."""
    monkeypatch.setattr(vec_isa, "ASKED_MODULES", ("torch._inductor.cpu_vec_isa", "opentc_not_a_module_imported"))
    assert vec_isa.AskedAhead.start() == "opentc_not_a_module_imported not imported yet"


def test_the_hosts_other_workers_wait_for_its_proof_a_bounded_time(tmp_path):
    key = vec_isa.machine_key({"PATH": "/usr/bin:/bin"})
    assert vec_isa.wait_for_proof(str(tmp_path), key, timeout=0.3) is None   # none came: torch's check runs there
    (tmp_path / vec_isa.PROOF_FILE).write_text(json.dumps({"key": key, "proven": False}))
    assert vec_isa.wait_for_proof(str(tmp_path), key, timeout=0.3) is False
    other = WorkerIdentity(rank=1, local_rank=1, world_size=2, local_world_size=2)
    defaults = CompileTimeDefaults(WorkerOptions(backend="inductor", device="cpu"), "rank1")
    (tmp_path / "train.py").write_text("")
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "fresh"), "PATH": "/usr/bin:/bin"}
    defaults.configure(environ, other, Program(str(tmp_path / "train.py")), environ["TORCHINDUCTOR_CACHE_DIR"])
    defaults.begin(environ)
    assert defaults._prover is None                                     # only local rank 0 starts the check


TORCH_27 = [f"1/{i}: ___check_obj_id(args[1].layers[{i}].is_initialized, 139909010845472)" for i in range(7)]
TORCH_214 = [f"1/{i}: args[1].layers[{i}].is_initialized == False                # if not self.is_initialized:  "
             f"# transformers/cache_utils.py:132 in update\nUser stack trace:\n  File \"modeling_layers.py\"..."
             for i in range(7)]


@pytest.mark.parametrize("reasons", [TORCH_27, TORCH_214, TORCH_214[:1]], ids=["torch 2.7", "torch 2.14", "2 layers"])
def test_a_block_recompiled_once_per_layer_is_named_with_the_cache_fix(reasons):
    listed = [{"function": "__call__", "where": "transformers/modeling_layers.py:82", "reason": r} for r in reasons]
    finding = per_layer_finding(listed, "compile the whole model (X)")
    assert finding is not None
    assert finding.problem.startswith(f"__call__ (transformers/modeling_layers.py:82) was compiled again for each "
                                      f"layer ({len(reasons)} recompilations"), finding.problem
    assert ("past torch's recompile limit (8) the remaining layers run uncompiled" in finding.problem) == \
        (len(reasons) == 7)
    assert finding.fix.startswith("the model builds a per-layer cache in training: set model.config.use_cache = "
                                  "False") and finding.fix.endswith("or compile the whole model (X)")


def test_recompilations_for_other_reasons_are_not_called_per_layer():
    shapes = [{"function": "forward", "where": "loop.py:10",
               "reason": f"0/{i}: tensor 'L['x']' size mismatch at index 0. expected {8 + i}, actual {9 + i}"}
              for i in range(4)]
    assert per_layer_finding(shapes, "-") is None
    one_index = [{"function": "forward", "where": "m.py:3", "reason": "0/1: L['self'].blocks[1].scale == 2"}]
    assert per_layer_finding(one_index, "-") is None                   # one, and not about a cache: unknown
    two = [{"function": "forward", "where": "m.py:3", "reason": f"0/{i}: L['self'].blocks[{i}].scale == 2"}
           for i in (1, 2)]
    finding = per_layer_finding(two, "compile the whole model (Y)")
    assert finding is not None and finding.fix.startswith("keep per-layer values (an index, a flag) out of")


@pytest.mark.slow
def test_regional_compilation_compiles_blocks_in_place_and_leaves_single_layers_eager():
    """torch.compile is lazy: nothing compiles here, but what would be compiled is set."""
    import torch
    from accelerate.utils import compile_regions
    from torch._dynamo.eval_frame import OptimizedModule

    from opentc_launcher.inductor.regional import builds_per_layer_cache, compile_blocks

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mix = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 8)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(4))
            self.head = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
            self.out = torch.nn.Linear(8, 10)

    def compiled(module):
        return getattr(module, "_compiled_call_impl", None) is not None

    names = sorted(Net().state_dict())
    stock = compile_regions(Net())          # accelerate's own: a copy with compiled wrappers, names changed
    assert isinstance(stock.out, OptimizedModule) and sorted(stock.state_dict()) != names

    model = Net()
    assert compile_blocks(model) is model                                # the model itself, in place
    assert sorted(model.state_dict()) == names                          # save_pretrained finds its own names
    assert all(compiled(block) for block in model.blocks) and compiled(model.head)
    assert not compiled(model.out) and not compiled(model.embed) and not compiled(model)   # single layers: eager
    assert type(model.blocks[0]) is Block
    graphs = Net()   # the Trainer's torch_compile_mode="reduce-overhead": CUDA graphs, the whole model as torch has it
    whole = compile_blocks(graphs, mode="reduce-overhead")
    assert isinstance(whole, OptimizedModule) and whole._orig_mod is graphs
    assert not any(compiled(m) for m in graphs.modules())

    class Config:
        use_cache = True

    cached = Net()
    cached.config = Config()
    assert builds_per_layer_cache(cached)
    whole = compile_blocks(cached)
    assert isinstance(whole, OptimizedModule) and whole._orig_mod is cached
    assert not any(compiled(m) for m in cached.modules())
    Config.use_cache = False
    assert not builds_per_layer_cache(cached)
    flat = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))   # no repeated blocks: whole
    assert isinstance(compile_blocks(flat), OptimizedModule)


def test_a_plain_scripts_torch_compile_is_regional_only_where_blocks_repeat():
    """patch_torch_compile on a stand-in for the torch module (the real one stays as it is): what each call gets, value
    by value. torch.compile is lazy: nothing compiles here (tests/test_inductor.py runs it, against eager)."""
    import types

    import torch
    from torch._dynamo.eval_frame import OptimizedModule

    from opentc_launcher.inductor.regional import patch_torch_compile, unpatched_compile, why_whole

    class Block(torch.nn.Module):
        def __init__(self, width=8, out=8):
            super().__init__()
            self.norm = torch.nn.LayerNorm(width)
            self.mix = torch.nn.Linear(width, out)

    class Net(torch.nn.Module):
        def __init__(self, widths=(8, 8, 8)):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 8)
            self.blocks = torch.nn.ModuleList(Block(w, o) for w, o in zip(widths, [*widths[1:], 8], strict=True))
            self.out = torch.nn.Linear(8, 10)

    def compiled(module):
        return getattr(module, "_compiled_call_impl", None) is not None

    notes: list[str] = []
    stand_in = types.SimpleNamespace(compile=torch.compile, nn=torch.nn, compiler=torch.compiler)
    patch_torch_compile(stand_in, notes.append)
    assert unpatched_compile(stand_in) is torch.compile and stand_in.compile is not torch.compile

    model = Net()
    wrapper = stand_in.compile(model, mode="default")
    assert isinstance(wrapper, OptimizedModule) and wrapper._orig_mod is model      # what torch.compile returns
    assert sorted(wrapper.state_dict()) == sorted(torch.compile(Net()).state_dict())  # "_orig_mod." names, as torch's
    assert all(compiled(block) for block in model.blocks) and not compiled(model.out) and not compiled(model)
    assert notes == ["torch.compile(Net) compiled its 3 repeated blocks in place, sharing one graph per kind of "
                     "block (1 kind), and 0 other part(s); 2 single layer(s) left eager (the head too: the model's "
                     "own forward runs its blocks)"]

    assert why_whole(Net(widths=(8, 16, 8)), {}) == "compiled whole: the model has no repeated blocks"
    assert why_whole(Net(), {"fullgraph": True}) == "compiled whole: fullgraph=True asks for one graph"
    for graphs, words in (({"mode": "reduce-overhead"}, "mode='reduce-overhead'"),
                          ({"mode": "max-autotune"}, "mode='max-autotune'"),
                          ({"options": {"triton.cudagraphs": True}}, "options={'triton.cudagraphs': True}")):
        assert why_whole(Net(), graphs) == f"compiled whole: {words} asks for CUDA graphs, measured on the whole " \
                                           "model, not on regions", graphs
    for regional in ({"mode": "max-autotune-no-cudagraphs"}, {"mode": "default"},
                     {"options": {"triton.cudagraphs": False}}):
        assert why_whole(Net(), regional) is None, regional
    cached = Net()
    cached.config = types.SimpleNamespace(use_cache=True)
    assert why_whole(cached, {}).startswith("compiled whole: model.config.use_cache is true")
    cached.config.use_cache = False
    assert why_whole(cached, {}) is None

    for whole, kwargs in ((Net(widths=(8, 16, 8)), {}), (Net(), {"fullgraph": True}),
                          (Net(), {"mode": "reduce-overhead"})):
        result = stand_in.compile(whole, **kwargs)                                   # torch's own, whole
        assert isinstance(result, OptimizedModule) and not any(compiled(m) for m in whole.modules())
    untouched = Net()
    stand_in.compile(untouched, disable=True)                                        # torch's own: nothing
    assert not any(compiled(m) for m in untouched.modules())

    def step(x):
        return x * 2
    assert stand_in.compile(step) is not step and len(notes) == 1                   # a function: torch's own


def test_the_head_is_said_as_what_regional_compilation_makes_of_it(tmp_path):
    """The head region is regional compilation's: on with it, moot without it, off by its own name."""
    assert configured(tmp_path, {}).state["head"].startswith("on: the model's own forward around its blocks")
    assert configured(tmp_path, {}, defaults_off="regional").state["head"] == \
        "not needed: the whole model is compiled, its head with it (regional off)"
    assert configured(tmp_path, {}, defaults_off="head").state["head"].startswith("off (")
    assert configured(tmp_path, {}, defaults_off="head").state["regional"].startswith("on")


def test_the_head_region_is_a_cpus_default_only(tmp_path, monkeypatch):
    """On a GPU the step measured slower with the head region (benchmarks/RESULTS.md, the H200): the state says so,
    and regional compilation, for a Trainer's accelerate and a plain torch.compile, is armed without the head. The
    armed changes are recorded, not made: no GPU here, and torch.compile stays torch's."""
    from opentc_launcher.inductor import compile_time, regional

    armed: dict[str, object] = {}
    monkeypatch.setattr(compile_time, "arm_change", lambda change, make=None: armed.__setitem__(change.name, make))
    heads: list[tuple[str, bool]] = []
    monkeypatch.setattr(regional, "patch_torch_compile",
                        lambda torch, noted, head, head_left: heads.append(("torch", head)))
    monkeypatch.setattr(regional, "patch_accelerator",
                        lambda accelerator, head, head_left: heads.append(("accelerate", head)) or True)
    for device, head in (("cuda", False), ("cpu", True)):
        heads.clear()
        state = configured(tmp_path, {}, device=device).state
        assert state["head"] == (compile_time.HEAD_ON_A_GPU if device == "cuda" else
                                 "on: the model's own forward around its blocks (output layer, loss) compiled as one "
                                 "region"), state
        for make in (armed[regional.TORCH_COMPILE.name], armed[regional.ACCELERATE_COMPILE_REGIONS.name]):
            make(object())
        assert heads == [("torch", head), ("accelerate", head)], (device, heads)
    assert compile_time.HEAD_ON_A_GPU.startswith("not on a GPU: ")

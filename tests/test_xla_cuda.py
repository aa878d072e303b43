"""XLA:CUDA from PyPI: torch-xla's PJRT plugin interface with NVIDIA's PJRT plugin (jax-cuda12-pjrt).

No GPU here, so these tests run the real plugin path as far as a machine without one allows: the plugin
binary found, its PJRT C API version read, torch-xla loading it with exact version checking and accepting
its client options, up to CUDA's own initialisation (cuInit), which fails without a driver. They fail when
one pin of the pair moves without the other, when the plugin file is missing, and when a torch-xla program
does not get the plugin registered.
"""

import json
import os
import subprocess
import textwrap

import pytest

from conftest import BIN, SCRIPTS, clean_env, run_train
from opentc_launcher.cuda_driver import driver_cuda_version
from opentc_launcher.xla import cuda as xla_cuda
from opentc_launcher.xla.cuda import (
    PJRT_C_API,
    PluginUnusable,
    check_cuda_plugin,
    check_driver,
    plugin_api_version,
)

pytestmark = [pytest.mark.slow, pytest.mark.xla]

PY = str(BIN / "python")
OUR_PLUGIN = "opentc_launcher.xla.cuda_plugin.CudaPlugin"


# The programs here import torch_xla outside a worker of ours, and torch_xla 2.7 imports Inductor, which starts its
# compile-worker pool at once unless TORCH_WARM_POOL=0 (the worker sets it: xla/__init__.py): about 2 s of CPU a
# process, for nothing these programs compile.
NO_WARM_POOL = {"TORCH_WARM_POOL": "0"}


def python(code, tmp_path, timeout=180, **env):
    return subprocess.run([PY, "-c", textwrap.dedent(code)], env=clean_env(**NO_WARM_POOL, **env), cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def test_the_installed_plugin_speaks_the_api_this_torch_xla_expects():
    import importlib.metadata as metadata

    path = check_cuda_plugin()
    assert path.endswith("jax_plugins/xla_cuda12/xla_cuda_plugin.so") and os.path.isfile(path)
    release = ".".join(metadata.version("torch-xla").split(".")[:2])
    expected, plugin_release = PJRT_C_API[release]
    assert plugin_api_version(path) == expected
    assert metadata.version("jax-cuda12-pjrt") == plugin_release


def test_a_pin_moved_alone_is_named_with_both_versions_and_the_pair_to_pin():
    import importlib.metadata as metadata

    # torch-xla moved to the other known release, the plugin left where it is
    installed = ".".join(metadata.version("torch-xla").split(".")[:2])
    other = next(release for release in PJRT_C_API if release != installed)
    (major, minor), plugin = PJRT_C_API[other]
    found = plugin_api_version(check_cuda_plugin())
    with pytest.raises(PluginUnusable) as err:
        check_cuda_plugin(torch_xla_version=f"{other}.1")
    assert str(err.value).startswith(
        f"XLA:CUDA's PJRT plugin does not match torch-xla: jax-cuda12-pjrt {metadata.version('jax-cuda12-pjrt')} "
        f"speaks PJRT C API {found[0]}.{found[1]}, torch-xla {other}.1 expects {major}.{minor}.")
    assert f"torch-xla {other}.x with jax-cuda12-pjrt=={plugin}" in str(err.value)
    with pytest.raises(PluginUnusable, match=r"torch-xla 2\.9\.0 has no known XLA:CUDA plugin"):
        check_cuda_plugin(torch_xla_version="2.9.0")


def test_a_missing_plugin_file_is_named(tmp_path):
    # A copy of the wheel's metadata whose file list names the plugin, without the file: what a broken or
    # half-removed install looks like. It comes first on sys.path, so importlib.metadata finds it first.
    import importlib.metadata as metadata

    dist = metadata.distribution("jax-cuda12-pjrt")
    info = tmp_path / f"jax_cuda12_pjrt-{dist.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: jax-cuda12-pjrt\nVersion: {dist.version}\n")
    (info / "RECORD").write_text("jax_plugins/xla_cuda12/xla_cuda_plugin.so,,\n")
    found = python("""
        from opentc_launcher.xla.cuda import PluginUnusable, check_cuda_plugin
        try:
            check_cuda_plugin()
        except PluginUnusable as e:
            print("REFUSED", e)
        """, tmp_path, PYTHONPATH=str(tmp_path))
    assert "REFUSED XLA:CUDA's PJRT plugin file is missing: jax-cuda12-pjrt" in found.stdout, found.stdout
    assert str(tmp_path / "jax_plugins" / "xla_cuda12" / "xla_cuda_plugin.so") in found.stdout


def test_torch_xla_loads_the_real_plugin_up_to_cuda_initialisation(tmp_path):
    found = python("""
        import torch_xla
        try:
            torch_xla.device()
        except RuntimeError as e:
            print("STOPPED:", e)
        """, tmp_path, PJRT_DEVICE="CUDA", TF_CPP_MIN_LOG_LEVEL="0")
    out = found.stdout
    assert "failed call to cuInit" in out, out[-3000:]                            # CUDA itself was reached
    assert "STOPPED: Bad StatusOr access: FAILED_PRECONDITION: No visible GPU devices." in out, out[-3000:]
    assert "does not match" not in out and "Unexpected option" not in out
    # torch-xla checked the version exactly (the plugin keeps strict checking on)
    strict = python("""
        import os, torch_xla
        from torch_xla.experimental import plugins
        plugins.default().library_path()
        print("ENABLE_PJRT_COMPATIBILITY=" + os.environ["ENABLE_PJRT_COMPATIBILITY"])
        """, tmp_path, PJRT_DEVICE="CUDA")
    assert "ENABLE_PJRT_COMPATIBILITY=0" in strict.stdout, strict.stdout[-2000:]


def test_every_way_a_torch_xla_program_starts_gets_the_plugin(tmp_path):
    out = tmp_path / "seen"
    out.mkdir()
    env = {"PJRT_DEVICE": "CPU", **NO_WARM_POOL}
    runs = [
        [PY, str(SCRIPTS / "cuda_plugin_seen.py"), str(out), "launch"],            # python, then xmp.spawn
        [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "1", str(SCRIPTS / "cuda_plugin_seen.py"),
         str(out)],
    ]
    for argv in runs:
        done = subprocess.run(argv, env=clean_env(**env), cwd=str(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:]
    seen = [json.loads(p.read_text()) for p in out.iterdir()]
    assert sorted(s["tag"] for s in seen) == ["launch-child", "main", "torchrun-worker"]
    assert all(s["plugin"] == OUR_PLUGIN for s in seen), seen
    child = next(s for s in seen if s["tag"] == "launch-child")
    assert child["parent"] != os.getpid()


# Each case: the environment a process starts in, and the plugin's answers there.
CLIENT_OPTION_CASES = [
    ({}, {"platform_name": "gpu", "allocator": "default", "node_id": 0, "num_nodes": 1}, False, 1),
    # torchrun, 4 workers per host on 2 hosts, this one local rank 2 of host 1
    ({"LOCAL_RANK": "2", "RANK": "6", "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8", "GPU_NUM_DEVICES": "4"},
     {"platform_name": "gpu", "allocator": "default", "visible_devices": [2], "node_id": 6, "num_nodes": 8},
     True, 4),
    # xmp.spawn sets the PJRT_* pair only
    ({"PJRT_LOCAL_PROCESS_RANK": "1", "PJRT_LOCAL_PROCESS_COUNT": "2"},
     {"platform_name": "gpu", "allocator": "default", "visible_devices": [1], "node_id": 1, "num_nodes": 2},
     True, 1),
    # upstream's allocator switches
    ({"PJRT_ALLOCATOR_CUDA_ASYNC": "1", "PJRT_ALLOCATOR_FRACTION": "0.5", "PJRT_ALLOCATOR_PREALLOCATE": "false"},
     {"platform_name": "gpu", "allocator": "cuda_async", "memory_fraction": 0.5, "preallocate": False,
      "node_id": 0, "num_nodes": 1}, False, 1),
]

# One process answers every case (importing torch_xla is most of its time): before each, the environment is the
# case's alone; the plugin reads it when torch-xla asks, as in a process started with it.
PLUGIN_OPTIONS = """
    import json
    import os
    from opentc_launcher.xla.cuda_plugin import cuda_plugin   # before torch_xla: no circular import
    cases = json.loads(os.environ.pop("PLUGIN_CASES"))
    names = {name for case in cases for name in case}
    answers = []
    for env in cases:
        for name in names:
            os.environ.pop(name, None)
        os.environ.update(env)
        p = cuda_plugin()
        answers.append({"options": p.client_create_options(), "coordinator": p.requires_xla_coordinator(),
                        "chips": p.physical_chip_count()})
    print(json.dumps(answers))
    """


@pytest.fixture(scope="module")
def plugin_answers(tmp_path_factory):
    found = python(PLUGIN_OPTIONS, tmp_path_factory.mktemp("plugin"),
                   PLUGIN_CASES=json.dumps([env for env, *_ in CLIENT_OPTION_CASES]))
    assert found.returncode == 0, found.stdout[-3000:]
    return json.loads(found.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", range(len(CLIENT_OPTION_CASES)))
def test_client_options_follow_upstreams_cuda_plugin(plugin_answers, case):
    _, options, coordinator, chips = CLIENT_OPTION_CASES[case]
    assert plugin_answers[case] == {"options": options, "coordinator": coordinator, "chips": chips}


def test_ptxas_and_libdevice_are_where_the_plugin_looks():
    # The plugin searches $ORIGIN/../../nvidia/cuda_nvcc for XLA's CUDA data dir: ptxas and libdevice.
    import importlib.metadata as metadata

    root = os.path.normpath(os.path.join(os.path.dirname(check_cuda_plugin()), "..", "..", "nvidia", "cuda_nvcc"))
    assert os.path.isfile(os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc"))
    shown = subprocess.run([os.path.join(root, "bin", "ptxas"), "--version"], stdout=subprocess.PIPE, text=True,
                           timeout=60)
    assert shown.returncode == 0
    assert f"V{metadata.version('nvidia-cuda-nvcc-cu12')}" in shown.stdout


def test_a_gpu_job_without_a_gpu_starts_nothing(make_job):
    job = make_job()
    result = run_train(job, PJRT_DEVICE="CUDA")
    assert result.returncode == 2, result.output[-3000:]
    assert job.failure.startswith("Training not started: no GPU visible: PJRT_DEVICE=CUDA asks for XLA:CUDA")
    assert not (job.model / "model.safetensors").exists()


def test_opentc_run_refuses_cuda_without_a_gpu(tmp_path):
    done = subprocess.run([str(BIN / "opentc-run"), "--standalone", "--nproc-per-node", "1", "--device", "cuda",
                           str(SCRIPTS / "report_env.py")], env=clean_env(SM_MODEL_DIR=str(tmp_path)),
                          cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    assert done.returncode == 2
    assert "no GPU visible" in done.stdout
    assert not (tmp_path / "env-rank0.json").exists()


def test_the_module_reads_no_jax_and_no_torch_xla():
    # Finding and checking the plugin must work before torch-xla is imported (the worker does it first).
    found = subprocess.run([PY, "-c", "import sys; from opentc_launcher.xla.cuda import check_cuda_plugin; "
                                      "check_cuda_plugin(); print(sorted(m for m in sys.modules "
                                      "if m.split('.')[0] in ('jax', 'jax_plugins', 'torch_xla')))"],
                           env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert found.stdout.strip().splitlines()[-1] == "[]", found.stdout


def test_the_gpu_gates_all_reduce_script_runs_on_one_xla_cpu_worker(tmp_path):
    """dev/gpu-gate runs this script on every GPU of a GPU host; here it runs as one XLA:CPU worker, so a typo or
    an API that torch-xla does not have fails CI rather than the release build."""
    done = subprocess.run([str(BIN / "opentc-worker"), "--device", "cpu", str(SCRIPTS / "xla_all_reduce.py")],
                          env=clean_env(SM_MODEL_DIR=str(tmp_path)), cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    result = json.loads((tmp_path / "all-reduce-rank0.json").read_text())
    assert (result["rank"], result["world"], result["sum"], result["pjrt_device"]) == (0, 1, 1.0, "CPU")


@pytest.mark.parametrize(("version", "refused"), [((11, 8), True), ((12, 0), False), ((12, 6), False), (None, False)])
def test_a_driver_too_old_for_cuda_12_is_named(version, refused):
    # No NVIDIA driver here: the version the driver would report is given (driver_cuda_version reads it
    # through libcuda's cuDriverGetVersion, and says None without a driver, as here).
    if refused:
        with pytest.raises(PluginUnusable, match=r"the host's NVIDIA driver supports CUDA 11\.8; .* 525\.60\.13"):
            check_driver(version)
    else:
        check_driver(version)
    assert driver_cuda_version() is None


def test_the_status_line_names_the_pinned_stack():
    import importlib.metadata as metadata

    line = xla_cuda.status_line()
    assert line.startswith("XLA:CUDA: upstream PyTorch/XLA deprecated XLA:CUDA in 2.8 and removed it in 2.9")
    for name in ("torch", "torch-xla", "jax-cuda12-pjrt"):
        assert f"{name} {metadata.version(name)}" in line

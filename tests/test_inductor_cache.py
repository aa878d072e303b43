"""The Inductor cache survives what happens to a cache kept in /opt/ml/checkpoints (synced to S3 and restored): a
truncated or garbage file, a folder from before the check existed, a job stopped while gcc links, a read-only
mount. The workers compile in a working copy; the published folder changes only by a whole replacement after a
successful job, and a published cache that fails its manifest is set aside so the job trains without it.

Real Inductor on CPU through the real `train` (g++ builds real kernels); the damage is done to the real files a cold
job published, as a stop during a link, a bad sync or a stray edit leaves them.
"""

import json
import shutil
import signal
import time
from pathlib import Path

import pytest

from conftest import Job, new_job, read_only, run_train, start_train, stop, wait_for
from opentc_launcher.published_cache import MANIFEST, MANIFEST_FORMAT

pytestmark = [pytest.mark.slow, pytest.mark.inductor]

STEPS = 3


def loop_job(root: Path, cache: Path, **script_args) -> Job:
    return new_job(root, "compile/inductor_loop.py", sagemaker_training_compiler_enabled=True,
                   sagemaker_training_compiler_backend="inductor", sagemaker_training_compiler_cache_dir=str(cache),
                   **{"steps": STEPS, **script_args})


def published_folder(cache: Path) -> Path:
    (folder,) = [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("inductor-torch-")
                 and p.name.endswith("-cpu")]
    return folder


def manifest_holds(folder: Path) -> bool:
    """Every file the manifest lists is there with its size (what a later job's check needs to pass)."""
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["format"] == MANIFEST_FORMAT and manifest["files"]
    return all((folder / name).stat().st_size == entry["size"] for name, entry in manifest["files"].items())


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache a cold job published (its report, for the warm figures)."""
    base = tmp_path_factory.mktemp("warm")
    job = loop_job(base / "job", base / "cache")
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    assert "compilation cache: published" in result.output
    assert manifest_holds(published_folder(base / "cache"))
    return base / "cache", job.compile_report()


def copy_of(warm, tmp_path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(warm[0], cache)
    return cache


def a_kernel_library(folder):
    return next(p.with_suffix(".so") for p in sorted(folder.rglob("*.cpp"))
                if "__avx_chk_kernel" not in p.read_text() and p.with_suffix(".so").exists())


def test_a_damaged_file_is_set_aside_and_the_job_trains_and_publishes_a_sound_cache(warm, tmp_path):
    """A kernel library that Inductor would load and crash on, replaced by garbage; the kinds of damage (truncated,
    other bytes, missing), which the manifest finds whatever the file, are tests/test_published_cache.py's."""
    cache = copy_of(warm, tmp_path)
    folder = published_folder(cache)
    damaged = a_kernel_library(folder)
    relative = str(damaged.relative_to(folder))
    damaged.write_bytes(b"\x7fELF this is not a library" * 64)
    damaged_bytes = damaged.read_bytes()
    job = loop_job(tmp_path / "job", cache)
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    assert f"set aside: {folder} cannot be used, {relative} is damaged" in result.output, result.output[-5000:]
    assert job.compile_report()["graphs_compiled"] == warm[1]["graphs_compiled"] >= 2   # anew, as a cold job does
    (aside,) = [p for p in cache.iterdir() if ".set-aside-" in p.name]
    assert (aside / relative).read_bytes() == damaged_bytes                 # kept for a look
    assert manifest_holds(folder)
    # Kernels name the header by the folder they were compiled in, so a recompiled kernel may have another name.
    assert not (folder / relative).exists() or (folder / relative).read_bytes() != damaged_bytes
    again = loop_job(tmp_path / "again", cache)                              # and the next job is warm again
    result = run_train(again)
    assert result.returncode == 0 and again.compile_report()["graphs_compiled"] == 0, result.output[-5000:]


def test_a_cache_without_a_manifest_is_not_trusted(warm, tmp_path):
    cache = copy_of(warm, tmp_path)
    folder = published_folder(cache)
    (folder / MANIFEST).unlink()         # a cache written before the check existed, or by hand
    job = loop_job(tmp_path / "job", cache)
    result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    assert f"it has no manifest ({MANIFEST})" in result.output
    assert manifest_holds(folder)


def test_a_job_stopped_while_it_compiles_leaves_the_published_cache_as_it_was(warm, tmp_path):
    cache = copy_of(warm, tmp_path)
    folder = published_folder(cache)
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    job = loop_job(tmp_path / "job", cache, shapes="changing", steps=40)     # new graphs: gcc runs all along
    log = tmp_path / "train.log"
    proc = start_train(job, log)
    try:
        wait_for(lambda: "torch.compile (TorchInductor) ready" in log.read_text(), 120, "the worker", proc, log)
        time.sleep(3)     # into the first compilations (wherever the stop lands, the published folder must hold)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        stop(proc)
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before
    assert "only a successful job publishes its cache" in log.read_text()


def test_a_read_only_warm_cache_is_used_and_said_to_be_read_only(warm, tmp_path):
    cache = copy_of(warm, tmp_path)
    folder = published_folder(cache)
    job = loop_job(tmp_path / "job", cache)
    with read_only(cache):
        result = run_train(job)
    assert result.returncode == 0, result.output[-5000:]
    assert f"{cache} is not writable, so the cache is used as it is" in result.output
    assert "read-write" not in result.output
    report = job.compile_report()
    assert report["graphs_compiled"] == 0 and report["persistent_cache"]["hits"] >= 2, report
    assert f"compilation cache: not published: {cache} is not writable" in result.output
    assert manifest_holds(folder)

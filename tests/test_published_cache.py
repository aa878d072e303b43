"""The compilation cache's working copy and its publication (opentc_launcher.published_cache), with what jobs sharing a
checkpoints folder do to each other (issue 31 A) and what a user may have put where the cache folder goes (issue 31
G). Real files, real flock locks and real processes; no compiler: the cache's files are made up (Inductor's would do
the same)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_train, start_train, stop, wait_for
from opentc_launcher.published_cache import LOCK, LOCK_WAIT, MANIFEST, PUBLISHING, StopRequested, WorkingCopy

FILES = 200


def fill(folder: Path, files: int = FILES, tag: str = "new") -> None:
    for i in range(files):
        path = folder / f"sub{i % 7}" / f"entry{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"{tag}:{i}".encode() * 64)


def published_files(folder: Path) -> dict[str, int]:
    return {name: entry["size"] for name, entry in json.loads((folder / MANIFEST).read_text())["files"].items()}


def publisher(published: Path, working: Path, started: Path, pause: float) -> subprocess.Popen:
    """Another job publishing its working copy, slowly (`pause` seconds a file), in a process of its own; it writes
    `started` once its first file is copied, and prints what publish() said."""
    code = f"""
import time, sys
import opentc_launcher.published_cache as pc
copy = pc._copy_hashing
def slow(source, target):
    result = copy(source, target)
    open({str(started)!r}, "a").close()
    time.sleep({pause})
    return result
pc._copy_hashing = slow
cache = pc.WorkingCopy(published={str(published)!r}, working={str(working)!r})
cache.open()
print(cache.publish(), flush=True)
"""
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_starting_a_job_leaves_another_jobs_publication_in_progress_alone(tmp_path):
    """Issue 31 A: another job's open() took the free lock and removed every .new- folder as an interrupted
    publication; the publisher then published a cache with files missing, or failed. Now the .new- folder carries
    its publisher's claim, and open() clears only those whose publisher is gone."""
    published, working = tmp_path / "cache" / "inductor", tmp_path / "a-working"
    fill(working)
    started = tmp_path / "started"
    proc = publisher(published, working, started, pause=0.01)
    try:
        wait_for(started.exists, 60, "the publication to start", proc)
        staged = [p for p in published.parent.iterdir() if p.name.startswith("inductor.new-")]
        assert len(staged) == 1 and (staged[0] / PUBLISHING).exists()
        other = WorkingCopy(published=str(published), working=str(tmp_path / "b-working"))
        said = other.open()                              # a second job starts meanwhile
        assert said.startswith("cold: nothing published"), said   # the old cache (none), whole
        assert staged[0].exists(), "the publication in progress was removed"
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert out.startswith(f"published {FILES} files"), out
    assert len(published_files(published)) == FILES and not (published / PUBLISHING).exists()
    third = WorkingCopy(published=str(published), working=str(tmp_path / "c-working"))
    assert third.open().startswith(f"warm: {FILES} files"), "the new cache, whole"


def test_a_publication_cut_short_is_cleared_by_the_next_job(tmp_path):
    published, working = tmp_path / "cache" / "inductor", tmp_path / "a-working"
    fill(working)
    started = tmp_path / "started"
    proc = publisher(published, working, started, pause=0.05)
    try:
        wait_for(started.exists, 60, "the publication to start", proc)
    finally:
        proc.send_signal(signal.SIGKILL)   # a spot interruption's SIGKILL: its claim goes with the process
        proc.wait(timeout=30)
    assert [p for p in published.parent.iterdir() if p.name.startswith("inductor.new-")]
    said = WorkingCopy(published=str(published), working=str(tmp_path / "b-working")).open()
    assert said.startswith("cold: nothing published"), said
    assert [p.name for p in published.parent.iterdir() if ".new-" in p.name] == []


def publish_once(published: Path, tmp_path: Path, tag: str) -> str:
    """A job: its working copy opened (from what is published), then its own entries compiled over it, published."""
    working = tmp_path / f"working-{tag}"
    cache = WorkingCopy(published=str(published), working=str(working))
    cache.open()
    fill(working, 10, tag)
    return cache.publish()


def test_a_published_path_that_is_a_link_to_a_shared_folder_updates_that_folder(tmp_path):
    """Issue 31 G: the link was renamed .old-<hex> (and left in compile-cache/, syncing to S3) and replaced by a
    folder of its own, so the shared folder was never updated again."""
    shared = tmp_path / "shared" / "inductor-cache"
    checkpoints = tmp_path / "checkpoints" / "compile-cache"
    checkpoints.mkdir(parents=True)
    link = checkpoints / "inductor"
    link.symlink_to(shared)                                          # the shared folder does not exist yet
    said = publish_once(link, tmp_path, "first")
    assert said.startswith("published 10 files") and f"to {shared} (through the link {link})" in said, said
    assert link.is_symlink() and shared.is_dir() and len(published_files(shared)) == 10
    said = publish_once(link, tmp_path, "second")
    assert link.is_symlink() and (shared / "sub0" / "entry0.bin").read_bytes().startswith(b"second:0")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["inductor"], "nothing left beside the link"
    assert sorted(p.name for p in shared.parent.iterdir()) == [".opentc-publish.lock", "inductor-cache"]
    reader = WorkingCopy(published=str(link), working=str(tmp_path / "reader"))
    assert reader.open().startswith(f"warm: 10 files (5.1 KB) (a link to {shared}) checked"), "read through the link"


def test_a_file_where_the_cache_folder_goes_is_set_aside_and_the_job_publishes(tmp_path):
    """Issue 31 G: a regular file there made every job say 'cold: nothing published yet' and then fail to publish
    with NotADirectoryError, forever."""
    checkpoints = tmp_path / "checkpoints" / "compile-cache"
    checkpoints.mkdir(parents=True)
    path = checkpoints / "inductor"
    path.write_text("not a cache")
    cache = WorkingCopy(published=str(path), working=str(tmp_path / "working"))
    said = cache.open()
    fill(Path(cache.working), 10)
    assert said.startswith(f"set aside: {path} is a file, not a folder; set aside as {path}.set-aside-"), said
    assert cache.publish().startswith("published 10 files")
    assert path.is_dir() and len(published_files(path)) == 10
    aside = [p for p in checkpoints.iterdir() if ".set-aside-" in p.name]
    assert len(aside) == 1 and aside[0].read_text() == "not a cache"   # kept for a look, never deleted unseen

    linked = tmp_path / "elsewhere.txt"
    linked.write_text("a user's file")
    other = checkpoints / "other"
    other.symlink_to(linked)                                          # a link to a file: the link goes aside
    said = WorkingCopy(published=str(other), working=str(tmp_path / "w2")).open()
    assert said.startswith(f"set aside: {other} is a link to the file {linked}, not a folder"), said
    assert linked.read_text() == "a user's file" and not other.exists()


def test_the_claim_of_a_publication_costs_a_warm_job_nothing_it_can_measure(tmp_path):
    """What the claim adds (a flock on a file the publication makes): open() and publish() of a 2,000-file cache,
    measured. Printed, not asserted against a clock: CI shares its cores."""
    published = tmp_path / "cache" / "inductor"
    working = tmp_path / "working"
    cache = WorkingCopy(published=str(published), working=str(working))
    cache.open()
    fill(working, 2000)
    started = time.monotonic()
    said = cache.publish()
    publish_seconds = time.monotonic() - started
    warm = WorkingCopy(published=str(published), working=str(tmp_path / "warm"))
    started = time.monotonic()
    opened = warm.open()
    print(f"\npublish {publish_seconds:.2f} s ({said}); warm open {time.monotonic() - started:.2f} s ({opened})")
    assert said.startswith("published 2000 files") and opened.startswith("warm: 2000 files")
    assert sorted(os.listdir(published.parent)) == [".opentc-publish.lock", "inductor"]   # nothing staged left


def damage_truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


def damage_same_size(path: Path) -> None:   # a bad sync: the size the manifest lists, other bytes
    path.write_bytes(b"x" * path.stat().st_size)


def damage_remove(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize("damage", [damage_truncate, damage_same_size, damage_remove],
                         ids=["truncated", "other bytes, same size", "missing"])
def test_a_published_file_that_is_not_what_its_manifest_says_sets_the_cache_aside(tmp_path, damage):
    """Each kind of damage a stop, a sync or a stray edit leaves is found by the manifest's size and SHA-256, whatever
    the file is (tests/test_inductor_cache.py damages a real kernel library in a real job); the job starts cold."""
    published, working = tmp_path / "cache" / "inductor", tmp_path / "a-working"
    fill(working, files=20)
    first = WorkingCopy(published=str(published), working=str(working))
    first.open()
    first.publish()
    victim = published / "sub3" / "entry3.bin"
    damage(victim)
    said = WorkingCopy(published=str(published), working=str(tmp_path / "b-working")).open()
    assert said.startswith(f"set aside: {published} cannot be used, sub3/entry3.bin is "), said
    assert "compiling from nothing" in said and not published.exists()
    assert not any((tmp_path / "b-working").rglob("*.bin"))            # nothing of the damaged cache is used
    [aside] = [p for p in published.parent.iterdir() if ".set-aside-" in p.name]
    assert (aside / MANIFEST).exists()                                    # kept whole, for a look


# --- issue 40 F: a lock the job cannot open never costs it its run; G: a stop ends a wait for the lock ---

def published_cache(tmp_path: Path) -> Path:
    """A published cache of 10 files, its lock file removed (each test puts something of its own there)."""
    published = tmp_path / "cache" / "inductor"
    publish_once(published, tmp_path, "first")
    (published.parent / LOCK).unlink()
    return published


def planted_folder(lock: Path) -> str:
    lock.mkdir()
    return f"the lock {lock} cannot be opened (Is a directory)"


def planted_dangling_link(lock: Path) -> str:
    lock.symlink_to(lock.parent.parent / "outside" / "made-by-the-job")
    return f"the lock {lock} is a link"


def planted_fifo(lock: Path) -> str:
    os.mkfifo(lock)
    return f"the lock {lock} is not a regular file"


@pytest.mark.parametrize("plant", [planted_folder, planted_dangling_link, planted_fifo],
                         ids=["folder", "dangling link", "fifo"])
def test_a_lock_that_cannot_be_opened_means_the_cache_is_used_as_it_is_and_not_published(tmp_path, plant):
    """Issue 40 F: a lock file the job could not open failed the job (exit 1, the script never ran), and a link at
    the lock's name made a file wherever it pointed. Now the published cache is read as a read-only one is, and this
    job's entries are not published; nothing is made outside the cache's folder."""
    published = published_cache(tmp_path)
    (tmp_path / "outside").mkdir()
    why = plant(published.parent / LOCK)
    cache = WorkingCopy(published=str(published), working=str(tmp_path / "working"))
    said = cache.open()
    assert said.startswith(f"warm: 10 files (4.5 KB) checked against its manifest and copied; {why}, so the cache is "
                           f"used as it is and this job's new entries are not published"), said
    fill(Path(cache.working), 10, "second")
    assert cache.publish() == f"not published: {why}"
    assert (published / "sub0" / "entry0.bin").read_bytes().startswith(b"first:0")   # as it was
    assert list((tmp_path / "outside").iterdir()) == []


def test_a_lock_that_goes_bad_between_open_and_publish_is_not_published_and_says_why(tmp_path):
    published = published_cache(tmp_path)
    cache = WorkingCopy(published=str(published), working=str(tmp_path / "working"))
    cache.open()
    (published.parent / LOCK).unlink()
    why = planted_folder(published.parent / LOCK)
    assert cache.publish() == f"not published: {why}"
    assert (published / "sub0" / "entry0.bin").read_bytes().startswith(b"first:0")


class Held:
    """Another job's hold on the lock: a flock on its own open file description."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(root / LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        os.close(self.fd)


def stopped_after(seconds: float):
    at = time.monotonic() + seconds
    return lambda: time.monotonic() >= at


def test_a_stop_ends_the_wait_for_another_jobs_lock_at_open(tmp_path):
    """Issue 40 G: the wait slept up to LOCK_WAIT (120 s, SageMaker's whole grace before SIGKILL) without looking
    at the stop. With the product's own LOCK_WAIT: it ends within a second of the stop."""
    assert LOCK_WAIT == 120
    published = tmp_path / "cache" / "inductor"
    held = Held(published.parent)
    try:
        cache = WorkingCopy(published=str(published), working=str(tmp_path / "working"))
        started = time.monotonic()
        said = cache.open(stopped_after(1.0))
        assert time.monotonic() - started < 10, said
        assert said == "not used: the job is stopping" and not cache.writable
    finally:
        held.release()


def test_a_stop_ends_a_publication_waiting_for_the_lock_or_copying(tmp_path):
    published = published_cache(tmp_path)
    cache = WorkingCopy(published=str(published), working=str(tmp_path / "working"))
    cache.open()
    fill(Path(cache.working), 10, "second")
    held = Held(published.parent)
    try:
        started = time.monotonic()
        with pytest.raises(StopRequested, match="the job is stopping: no longer waiting for"):
            cache.publish(stopped_after(1.0))
        assert time.monotonic() - started < 10
    finally:
        held.release()
    with pytest.raises(StopRequested, match=r"the publication to .* was given up"):
        cache.publish(lambda: True)   # the lock is free: the stop is seen between two files
    assert (published / "sub0" / "entry0.bin").read_bytes().startswith(b"first:0")   # as it was
    assert sorted(os.listdir(published.parent)) == [LOCK, "inductor"]                 # nothing staged left


def cached_job(make_job, cache: Path):
    """A job on Inductor with a compilation cache whose script compiles nothing: what is measured is the cache's
    working copy around it, in the real `train`."""
    return make_job(script="argv_echo.py", sagemaker_training_compiler_enabled=True,
                    sagemaker_training_compiler_backend="inductor", sagemaker_training_compiler_cache_dir=str(cache))


@pytest.mark.slow
def test_a_job_whose_cache_lock_cannot_be_opened_runs_its_script_and_says_it_does_not_publish(make_job, tmp_path):
    """Issue 40 F, through `train`: exit 1, "the toolkit failed", the script never ran."""
    cache = tmp_path / "cache"
    cache.mkdir()
    why = planted_folder(cache / LOCK)
    job = cached_job(make_job, cache)
    result = run_train(job, timeout=300)
    assert result.returncode == 0, result.output[-3000:]
    assert (job.model / "argv.json").exists()
    assert f"{why}, so the cache is used as it is and this job's new entries are not published" in result.output
    assert f"compilation cache: not published: {why}" in result.output


def test_a_job_stopped_while_it_waits_for_another_jobs_lock_ends_at_once(make_job, tmp_path):
    """Issue 40 G, through `train`: SIGTERM 5 s into the wait, and the job ended 115 s later (SageMaker's grace
    before SIGKILL is 120 s). The product's own LOCK_WAIT and grace."""
    cache = tmp_path / "cache"
    held = Held(cache)
    job = cached_job(make_job, cache)
    log = tmp_path / "train.log"
    proc = start_train(job, log)
    try:
        wait_for(lambda: "another job holds" in log.read_text(), 120, "the wait for the lock", proc, log)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert proc.wait(timeout=LOCK_WAIT) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 15, log.read_text()[-3000:]
    finally:
        stop(proc)
        held.release()
    assert not (job.model / "argv.json").exists(), "the script never started"
    assert "compilation cache" in log.read_text() and "not used: the job is stopping" in log.read_text()

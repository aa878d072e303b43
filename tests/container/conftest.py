"""The container tests: the built images, run through the docker CLI the way SageMaker and users run them.

Which images: OPENTC_IMAGE (the xla flavour) and OPENTC_INDUCTOR_IMAGE (the inductor flavour); dev/test builds
both from ./Dockerfile and sets them. Fixtures: `image` is the xla image (what most tests here check, as before the
second flavour existed), `inductor_image` the inductor one, and `each_image` runs a test once on each. Which
engine: DOCKER_HOST, and OPENTC_DOCKER for the client (default /usr/bin/docker, else `docker` on PATH). A missing
image or engine fails every test here with the reason; OPENTC_CONTAINER_TESTS=skip skips them (machines without
root or Docker). Nothing is mocked but the GPU: the images run their jobs on the CPU (XLA:CPU, Inductor's C++), as
the CPU stand-in build is meant to.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from conftest import Job, new_job

OPT_OUT = "OPENTC_CONTAINER_TESTS"
DOCKER = os.environ.get("OPENTC_DOCKER") or (
    "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else shutil.which("docker") or "docker")


def docker(*args: str, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
    """One docker CLI call (an argv list, never a shell string); stdout and stderr together."""
    return subprocess.run([DOCKER, *args], input=input, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def unique(prefix: str = "opentc-test") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


IMAGE_VARIABLES = {"xla": "OPENTC_IMAGE", "inductor": "OPENTC_INDUCTOR_IMAGE"}


def image_of(flavour: str) -> str:
    """The image of a flavour under test; fails (never skips silently) when it or the engine is not there."""
    if os.environ.get(OPT_OUT) == "skip":
        pytest.skip(f"container tests skipped: {OPT_OUT}=skip")
    hint = (f"dev/test builds the images and starts the engine (it needs root and apt); set {OPT_OUT}=skip "
            f"to run the other tests without Docker.")
    build_error = os.environ.get("OPENTC_CONTAINER_ERROR")
    if build_error:
        pytest.fail(f"no image to test: {build_error}. {hint}", pytrace=False)
    variable = IMAGE_VARIABLES[flavour]
    name = os.environ.get(variable)
    if not name:
        pytest.fail(f"{variable} is not set: no {flavour} image to test. {hint}", pytrace=False)
    try:
        found = docker("image", "inspect", "--format", '{{index .Config.Labels "org.opentc.flavour"}}', name,
                       timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"the docker client {DOCKER} could not be run: {e}. {hint}", pytrace=False)
    if found.returncode != 0:
        pytest.fail(f"image {name} not found through {DOCKER} (DOCKER_HOST={os.environ.get('DOCKER_HOST')}): "
                    f"{found.stdout.strip()}. {hint}", pytrace=False)
    if found.stdout.strip() != flavour:
        pytest.fail(f"{variable}={name} is the {found.stdout.strip() or 'unlabelled'} flavour, not {flavour}",
                    pytrace=False)
    return name


@pytest.fixture(scope="session")
def image() -> str:
    return image_of("xla")


@pytest.fixture(scope="session")
def inductor_image() -> str:
    return image_of("inductor")


@pytest.fixture(scope="session", params=list(IMAGE_VARIABLES))
def each_image(request) -> str:
    return image_of(request.param)


@pytest.fixture
def containers():
    """Names for containers (and networks, images) a test creates; all removed when it ends."""
    made: list[tuple[str, str]] = []

    def name(kind: str = "container", prefix: str = "opentc-test") -> str:
        value = unique(prefix)
        made.append((kind, value))
        return value

    yield name
    for kind, value in reversed(made):
        command = {"container": ("rm", "--force", "--volumes"), "network": ("network", "rm"),
                   "image": ("image", "rm", "--force")}[kind]
        docker(*command, value)


@pytest.fixture(autouse=True)
def _files_back_to_the_tester(request, tmp_path):
    """Jobs write into tmp_path as root (as on SageMaker); give the files back so pytest can delete them."""
    yield
    used = [name for name in ("image", "inductor_image", "each_image") if name in request.fixturenames]
    if os.getuid() == 0 or not used:
        return
    give_back(request.getfixturevalue(used[0]), tmp_path)


def give_back(image: str, folder: Path) -> None:
    """The files under `folder` to the tester, through `image` (it has chown and runs as root)."""
    docker("run", "--rm", "--network", "none", "--entrypoint", "chown", "-v", f"{folder}:/mnt", image,
           "-R", f"{os.getuid()}:{os.getgid()}", "/mnt")


@dataclass
class ContainerRun:
    returncode: int
    output: str
    seconds: float


def run_job(image: str, name: str, job: Job | None = None, *options: str, timeout: float = 600,
            command: tuple[str, ...] = ("train",)) -> ContainerRun:
    """`docker run --network none -v <job>:/opt/ml <image> train`: the job folder is what SageMaker mounts."""
    mount = ("-v", f"{job.root}:/opt/ml") if job else ()
    started = time.monotonic()
    try:
        proc = docker("run", "--name", name, "--network", "none", *mount, *options, image, *command,
                      timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not end within {timeout} s:\n{logs(name)[-5000:]}") from None
    return ContainerRun(proc.returncode, proc.stdout, time.monotonic() - started)


# The hyperparameters of the sample job several tests read (image_sample_run): short, and a loss line every 2 steps.
IMAGE_SAMPLE = {"max_steps": 8, "log_every": 2}


def image_sample_run(run_once, image: str, compiler: bool) -> tuple[Job, ContainerRun]:
    """The sample job (IMAGE_SAMPLE) in `image`, compiler off or on (no backend named: the image's own compiler),
    run once in this test run for the tests that only read it (conftest.run_once)."""
    def make(folder: Path) -> None:
        job = new_job(folder / "job", sagemaker_training_compiler_enabled=compiler, **IMAGE_SAMPLE)
        name = unique()
        try:
            run = run_job(image, name, job)
        finally:
            docker("rm", "--force", "--volumes", name)
        if os.getuid() != 0:    # the job wrote as root, as on SageMaker
            give_back(image, folder)
        (folder / "run.json").write_text(json.dumps(asdict(run)))

    key = "".join(c if c.isalnum() or c in "-_." else "_" for c in image)
    folder = run_once(f"image-sample-{key}-{'on' if compiler else 'off'}", make)
    return Job(folder / "job"), ContainerRun(**json.loads((folder / "run.json").read_text()))


def start_job(image: str, job: Job, name: str, *options: str, network: str = "none") -> None:
    """The same, detached: the container keeps running after this returns."""
    started = docker("run", "--detach", "--name", name, "--network", network, "-v", f"{job.root}:/opt/ml",
                     *options, image, "train")
    assert started.returncode == 0, started.stdout


def wait_container(name: str, timeout: float) -> int:
    try:
        waited = docker("wait", name, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"container {name} still running after {timeout} s:\n{logs(name)}") from None
    assert waited.returncode == 0, waited.stdout
    return int(waited.stdout.strip())


def logs(name: str) -> str:
    return docker("logs", name).stdout


def inspect(name: str) -> dict:
    found = docker("inspect", name)
    assert found.returncode == 0, found.stdout
    return json.loads(found.stdout)[0]


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())

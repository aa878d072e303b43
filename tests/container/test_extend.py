"""The image as a base: a user's Dockerfile FROM it adds a requirement (a local package, so the build needs no
index) and a training script in /opt/ml/code with SAGEMAKER_PROGRAM, as AWS documents for custom images.
The job then runs without network, with input/, model/ and output/ mounted one by one as SageMaker mounts them
(a mount of all of /opt/ml would hide the baked code)."""

import textwrap

import pytest

from .conftest import docker, inspect, run_job

pytestmark = pytest.mark.container

SCRIPT = """\
import importlib.metadata, os
import torch
from shout import shout
with open(os.path.join(os.environ["SM_MODEL_DIR"], "shout.txt"), "w") as f:
    f.write(f"{shout('hello')} shout {importlib.metadata.version('shout')} torch {torch.__version__}")
"""


def write_build_context(folder, image):
    package = folder / "shout"
    package.mkdir(parents=True)
    (package / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "shout"
        version = "1.2.3"
        """))
    (package / "shout.py").write_text("def shout(text):\n    return text.upper() + '!'\n")
    (folder / "train.py").write_text(SCRIPT)
    (folder / "Dockerfile").write_text(textwrap.dedent(f"""\
        FROM {image}
        COPY shout /tmp/shout
        RUN pip install --no-cache-dir --no-index --no-build-isolation /tmp/shout && rm -rf /tmp/shout
        COPY train.py /opt/ml/code/train.py
        ENV SAGEMAKER_PROGRAM=train.py
        """))


def test_a_derived_image_runs_its_own_script_and_requirement(each_image, make_job, containers, tmp_path):
    context = tmp_path / "context"
    write_build_context(context, each_image)
    torch = inspect(each_image)["Config"]["Labels"]["org.opentc.torch"]
    derived = containers("image", "opentc-test-derived")
    built = docker("build", "--tag", derived, str(context), timeout=600)
    assert built.returncode == 0, built.stdout[-4000:]

    job = make_job()
    hyperparameters = job.hyperparameters()
    del hyperparameters["sagemaker_program"]          # the image says which script: SAGEMAKER_PROGRAM
    job.write_hyperparameters(hyperparameters)
    mounts = [arg for part in ("input", "model", "output")
              for arg in ("-v", f"{job.root / part}:/opt/ml/{part}")]
    (job.root / "model").mkdir(exist_ok=True)
    (job.root / "output").mkdir(exist_ok=True)
    result = run_job(derived, containers(), None, *mounts)
    assert result.returncode == 0, result.output[-4000:]
    assert (job.model / "shout.txt").read_text().startswith(f"HELLO! shout 1.2.3 torch {torch}")
    assert job.succeeded


def test_a_derived_images_pip_install_cannot_move_torch(each_image, containers, tmp_path):
    """PIP_CONSTRAINT holds torch, torch-xla, the XLA:CUDA plugin and the CUDA libraries at the image's versions
    for every pip install, a derived image's own included: a package that needs another torch fails the build,
    naming torch, instead of quietly replacing the stack under torch-xla."""
    package = tmp_path / "context" / "wants_new_torch"
    package.mkdir(parents=True)
    (package / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "wants-new-torch"
        version = "1.0"
        dependencies = ["torch>=2.99"]
        """))
    (package / "wants_new_torch.py").write_text("")
    (tmp_path / "context" / "Dockerfile").write_text(textwrap.dedent(f"""\
        FROM {each_image}
        COPY wants_new_torch /tmp/wants_new_torch
        RUN pip install --no-cache-dir --no-index --no-build-isolation /tmp/wants_new_torch
        """))
    # --force-rm: the failed step's container goes too (the classic builder keeps it otherwise).
    built = docker("build", "--force-rm", "--tag", containers("image", "opentc-test-derived"),
                   str(tmp_path / "context"), timeout=600)
    assert built.returncode != 0, built.stdout[-3000:]
    assert "torch>=2.99" in built.stdout and "torch==" in built.stdout, built.stdout[-3000:]

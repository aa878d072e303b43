"""Build step, not kept in the image: checks that what the image's labels claim is what got installed, and
writes /opt/opentc/image.json (read by help.py). A mismatch fails the build, so the labels cannot go stale;
so does an XLA:CUDA plugin that does not speak the PJRT C API version torch-xla expects.

usage: build_info.py OUTPUT.json KEY=VALUE...   keys: flavour opentc torch torch-xla jax-cuda12-pjrt pjrt-c-api cuda
       ptxas python (checked; "none": not installed in this flavour), base os source xla-image-tag (recorded)
"""

import importlib.metadata as metadata
import json
import os
import platform
import subprocess
import sys

import torch

CHECKED = ("opentc", "torch", "torch-xla", "jax-cuda12-pjrt", "pjrt-c-api", "cuda", "ptxas")
NONE = "none"


def installed(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return NONE


def pjrt_api(problems: list[str]) -> str:
    """The XLA:CUDA plugin's PJRT C API version, checked against torch-xla's; none without torch-xla."""
    if installed("torch-xla") == NONE:
        return NONE
    from opentc_launcher.api import PluginUnusable, check_cuda_plugin, plugin_api_version

    try:
        major, minor = plugin_api_version(check_cuda_plugin())
    except PluginUnusable as e:
        problems.append(str(e))
        return "unusable"
    return f"{major}.{minor}"


def ptxas_version() -> str:
    """The version XLA's ptxas reports (`Cuda compilation tools, release 12.6, V12.6.85`), or why it did not run;
    none without nvidia-cuda-nvcc-cu12 (Triton brings its own)."""
    if installed("nvidia-cuda-nvcc-cu12") == NONE:
        return NONE
    import nvidia.cuda_nvcc

    ptxas = os.path.join(next(iter(nvidia.cuda_nvcc.__path__)), "bin", "ptxas")
    try:
        shown = subprocess.run([ptxas, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"not runnable ({e})"
    release = [line for line in shown.splitlines() if line.startswith("Cuda compilation tools")]
    return release[0].rsplit(" V", 1)[-1] if release else f"unknown ({shown.strip()[:200]})"


def main(output: str, claims: dict[str, str]) -> int:
    problems: list[str] = []
    api = pjrt_api(problems)
    found = {
        "flavour": claims["flavour"],
        "opentc": metadata.version("opentc-toolkit"),
        "opentc-launcher": metadata.version("opentc-launcher"),
        "torch": metadata.version("torch"),
        "torch-xla": installed("torch-xla"),
        "jax-cuda12-pjrt": installed("jax-cuda12-pjrt"),
        "pjrt-c-api": api,
        "cuda": torch.version.cuda or "none",
        "ptxas": ptxas_version(),
        "python": platform.python_version(),
        "transformers": metadata.version("transformers"),
        "accelerate": metadata.version("accelerate"),
        "datasets": metadata.version("datasets"),
        "sagemaker-training": metadata.version("sagemaker-training"),
    }
    problems += [f"{key}: the label says {claims[key]}, installed is {found[key]}"
                 for key in CHECKED if found[key].split("+")[0] != claims[key]]
    if found["opentc-launcher"] != found["opentc"]:
        problems.append(f"opentc-launcher {found['opentc-launcher']} != opentc-toolkit {found['opentc']}")
    if not (found["python"] + ".").startswith(claims["python"] + "."):
        problems.append(f"python: the label says {claims['python']}, installed is {found['python']}")
    if problems:
        print("build_info.py: the image's labels do not match what is installed:", *problems, sep="\n  ",
              file=sys.stderr)
        return 1
    info = {**found, **{k: v for k, v in claims.items() if k not in found},
            "xla-cuda": (f"PJRT plugin jax-cuda12-pjrt {found['jax-cuda12-pjrt']} (PJRT C API {api})"
                         if api != NONE else NONE),
            "cuda-architectures": torch._C._cuda_getArchFlags() or NONE}
    with open(output, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    print(json.dumps(info, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])))

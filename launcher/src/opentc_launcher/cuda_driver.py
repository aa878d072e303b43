"""The host's NVIDIA driver against the CUDA this torch was built for.

A driver supports every CUDA release of its major version from NVIDIA's minimum on (CUDA minor version
compatibility: 12.x from R525, 13.x from R580). A torch built for a newer CUDA than the driver supports fails deep in
the script ("The NVIDIA driver on your system is too old"), or in Triton; a job that would use CUDA is stopped
before its script instead, naming the driver found, what is needed, and where an image's other flavour runs. CUDA
forward compatibility (NVIDIA's cuda-compat package, which lets a newer CUDA run on an older datacenter driver) is
not published on PyPI or in Debian, the only sources this image is built from, so it is not in the image.

Nothing here imports torch or creates a CUDA context: torch's version file is read as text, and the driver is asked
through its own libraries (libcuda's cuDriverGetVersion, NVML's nvmlSystemGetDriverVersion).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
from collections.abc import Mapping

from .installed import has_module

# NVIDIA's minimum Linux driver for each CUDA major version (minor version compatibility, CUDA's release notes).
MIN_LINUX_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
XLA_IMAGE_VARIABLE = "OPENTC_XLA_IMAGE_TAG"   # the inductor image names the xla image by this (Dockerfile)
_TORCH_CUDA = re.compile(r"^cuda(?:\s*:[^=]*)?=\s*['\"]([0-9]+)\.([0-9]+)", re.MULTILINE)
_TAG_CUDA = re.compile(r"-cu([0-9]+)([0-9])-")


def torch_cuda_version() -> tuple[int, int] | None:
    """The CUDA version the installed torch was built for (torch/version.py), or None for a CPU build or no torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as f:
            found = _TORCH_CUDA.search(f.read())
    except OSError:
        return None
    return (int(found[1]), int(found[2])) if found else None


def driver_cuda_version() -> tuple[int, int] | None:
    """The CUDA version the host's NVIDIA driver supports (cuDriverGetVersion needs no GPU context), or None where
    no driver is mounted into this container."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    if version.value <= 0:   # a driver that answers but names no CUDA version: none that torch can use
        return (0, 0)
    return version.value // 1000, (version.value % 1000) // 10


def supports(version: tuple[int, int]) -> str:
    """What a driver's CUDA version says, in words: "supports CUDA 12.4", or that it names none (0, or below)."""
    if version <= (0, 0):
        return "reports no CUDA version (cuDriverGetVersion gave 0 or less)"
    return f"supports CUDA {version[0]}.{version[1]}"


def driver_version() -> str | None:
    """The driver's own version ("550.54.15"), from NVML, or None."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        buffer = ctypes.create_string_buffer(96)
        if nvml.nvmlInit_v2() != 0 or nvml.nvmlSystemGetDriverVersion(buffer, 96) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return buffer.value.decode("ascii", "replace") or None


def _xla_image(env: Mapping[str, str]) -> str:
    """Where the other flavour runs, for an image without torch-xla that knows its xla sibling's tag."""
    tag = env.get(XLA_IMAGE_VARIABLE, "").strip()
    if not tag or has_module("torch_xla"):
        return ""
    cuda = _TAG_CUDA.search(tag)
    if not cuda:
        return f", or use the xla image (tag {tag})"
    major = int(cuda[1])
    return (f", or use the xla image (tag {tag}), built for CUDA {major}.{cuda[2]}: drivers from "
            f"{MIN_LINUX_DRIVER.get(major, 'R' + str(major))} on")


def driver_problem(env: Mapping[str, str], needed: tuple[int, int] | None = None,
                   found: tuple[int, int] | None = None) -> str | None:
    """Why this host's driver cannot run this torch's CUDA, with what to do; None when it can, or when either is
    unknown (no driver mounted: the device check says there is no GPU; a CPU build of torch). `needed` and `found`:
    the CUDA torch was built for and the driver's, where the host was probed already (host.HostFacts)."""
    needed, found = needed or torch_cuda_version(), found or driver_cuda_version()
    if needed is None or found is None or found >= (needed[0], 0):
        return None
    import importlib.metadata as metadata

    name = driver_version()
    driver = f"driver {name}" if name else "driver"
    minimum = MIN_LINUX_DRIVER.get(needed[0], f"R{needed[0]}")
    return (f"the host's NVIDIA {driver} {supports(found)}; this image's torch "
            f"{metadata.version('torch').split('+')[0]} is built for CUDA {needed[0]}.{needed[1]}, which needs a "
            f"driver for CUDA {needed[0]}.x (Linux {minimum} or later). Update the driver, or choose an instance "
            f"type (or AMI) whose driver is newer{_xla_image(env)}.")

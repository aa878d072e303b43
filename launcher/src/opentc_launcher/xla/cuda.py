"""XLA:CUDA from PyPI alone: torch-xla's PJRT plugin interface with NVIDIA's PJRT plugin from JAX's wheel.

PyPI's torch-xla wheels have no CUDA build inside; they load PJRT plugins instead. The plugin binary comes
from `jax-cuda12-pjrt` (jax_plugins/xla_cuda12/xla_cuda_plugin.so), the CUDA libraries from torch's
nvidia-* wheels in the same site-packages (the binary's RPATH finds them), ptxas and libdevice from
`nvidia-cuda-nvcc-cu12` (nvidia/cuda_nvcc), and the driver from the host. This module finds the binary and
checks that it speaks the PJRT C API version this torch-xla was built for, without importing jax or
torch_xla and without a GPU. `cuda_plugin.CudaPlugin` is the plugin torch-xla loads.
"""

from __future__ import annotations

import ctypes
import importlib.metadata as metadata
import os

from ..backend import LaunchRefused
from ..cuda_driver import supports
from ..installed import version

PLUGIN_DISTRIBUTION = "jax-cuda12-pjrt"
PLUGIN_LIBRARY = "xla_cuda_plugin.so"
# The PJRT C API version each torch-xla release was built against (read from the binaries), and the
# jax-cuda12-pjrt release that speaks exactly that version. stacks/xla.txt pins one such pair; the test
# tests/test_xla_cuda.py loads the installed pair through torch-xla with exact version checking.
PJRT_C_API = {
    "2.7": ((0, 67), "0.5.3"),
    "2.8": ((0, 70), "0.6.2"),
}
# The oldest driver this stack runs on: CUDA's minor version compatibility lets a driver for any CUDA 12.x (Linux
# >= 525.60.13) run torch's CUDA 12.6 libraries and the plugin; XLA compiles with its own ptxas, so no PTX
# needs the driver's JIT. (A driver for 12.6 itself, >= 560.28.03, also lets XLA compile in parallel.)
MIN_DRIVER_CUDA = (12, 0)
# PJRT_Api (xla/pjrt/c/pjrt_c_api.h) starts {size_t struct_size; void* extension_start; PJRT_Api_Version
# pjrt_api_version}, and PJRT_Api_Version is {size_t struct_size; void* extension_start; int major; int minor}.
_VERSION_OFFSET = 2 * ctypes.sizeof(ctypes.c_size_t) + 2 * ctypes.sizeof(ctypes.c_void_p)


class PluginUnusable(LaunchRefused):
    """XLA:CUDA's plugin is missing or does not match this torch-xla; the message says which pins to change."""


def plugin_library_path() -> str:
    """Where the plugin binary is, from the wheel's own file list (jax_plugins/xla_cuda12 imports jax)."""
    try:
        dist = metadata.distribution(PLUGIN_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise PluginUnusable(
            f"XLA:CUDA's PJRT plugin is not installed: the wheel {PLUGIN_DISTRIBUTION} is missing. Install the "
            f"pinned one: pip install -c /opt/opentc/constraints.txt {PLUGIN_DISTRIBUTION} (in a checkout: "
            f"-c constraints.txt -c stacks/xla.txt).") from None
    listed = [f for f in dist.files or () if f.name == PLUGIN_LIBRARY]
    path = os.path.abspath(str(dist.locate_file(listed[0]))) if listed else ""
    if not path or not os.path.isfile(path):
        raise PluginUnusable(
            f"XLA:CUDA's PJRT plugin file is missing: {PLUGIN_DISTRIBUTION} {dist.version} is installed but "
            f"{path or PLUGIN_LIBRARY} is not there. Reinstall it: pip install --force-reinstall --no-deps "
            f"-c /opt/opentc/constraints.txt {PLUGIN_DISTRIBUTION}.")
    return os.path.realpath(path)


def plugin_api_version(path: str) -> tuple[int, int]:
    """The PJRT C API version the plugin binary speaks, read through its GetPjrtApi() (no GPU needed)."""
    try:
        library = ctypes.CDLL(path)
        get_api = library.GetPjrtApi
    except (OSError, AttributeError) as e:
        raise PluginUnusable(f"XLA:CUDA's PJRT plugin {path} could not be loaded: {e}") from None
    get_api.restype = ctypes.c_void_p
    api = get_api()
    if not api:
        raise PluginUnusable(f"XLA:CUDA's PJRT plugin {path} returned no PJRT API")
    major, minor = (ctypes.c_int * 2).from_address(api + _VERSION_OFFSET)
    return int(major), int(minor)


def _release(version: str) -> str:
    """2.7 for 2.7.0 or 2.7.0+cu126."""
    return ".".join(version.split("+")[0].split(".")[:2])


def expected_api_version(torch_xla_version: str) -> tuple[int, int]:
    """The PJRT C API version a torch-xla release expects."""
    release = _release(torch_xla_version)
    if release not in PJRT_C_API:
        known = ", ".join(f"torch-xla {r}.x" for r in PJRT_C_API)
        raise PluginUnusable(
            f"torch-xla {torch_xla_version} has no known XLA:CUDA plugin: this launcher knows {known}. "
            f"torch-xla 2.9 and later refuse XLA:CUDA altogether; pin torch and torch-xla to one of those.")
    return PJRT_C_API[release][0]


def check_cuda_plugin(torch_xla_version: str | None = None) -> str:
    """The plugin binary's path, once its PJRT C API version is exactly the one torch-xla expects.

    torch-xla's own check lets any newer minor version through (or, with ENABLE_PJRT_COMPATIBILITY=0,
    aborts the process); this one stops with the two versions and the pins to change instead.
    """
    torch_xla_version = torch_xla_version or version("torch-xla") or "not installed"
    expected = expected_api_version(torch_xla_version)
    path = plugin_library_path()
    found = plugin_api_version(path)
    if found != expected:
        release = _release(torch_xla_version)
        raise PluginUnusable(
            f"XLA:CUDA's PJRT plugin does not match torch-xla: {PLUGIN_DISTRIBUTION} "
            f"{version(PLUGIN_DISTRIBUTION)} speaks PJRT C API {found[0]}.{found[1]}, torch-xla "
            f"{torch_xla_version} expects {expected[0]}.{expected[1]}. Pin them as a pair in stacks/xla.txt: "
            f"torch-xla {release}.x with {PLUGIN_DISTRIBUTION}=={PJRT_C_API[release][1]} (torch and torch-xla "
            f"at the same version).")
    return path


def check_driver(version: tuple[int, int] | None) -> None:
    """A driver too old for CUDA 12 stops the job with what to change, instead of failing inside XLA."""
    if version is not None and version < MIN_DRIVER_CUDA:
        raise PluginUnusable(
            f"the host's NVIDIA driver {supports(version)}; this image's XLA:CUDA (torch's "
            f"CUDA 12.6 libraries, NVIDIA's PJRT plugin) needs a driver for CUDA {MIN_DRIVER_CUDA[0]}.x or later "
            f"(Linux driver 525.60.13 or later; 560.28.03 or later for CUDA 12.6 itself). Update the driver, or "
            f"use an instance type whose driver is newer.")


def status_line() -> str:
    """What XLA:CUDA's upstream status means for a job that uses it, said once per job."""
    versions = ", ".join(f"{name} {version(name)}" for name in ("torch", "torch-xla", PLUGIN_DISTRIBUTION))
    return (f"XLA:CUDA: upstream PyTorch/XLA deprecated XLA:CUDA in 2.8 and removed it in 2.9, so this stack "
            f"({versions}) is pinned and will not move further; fixes come from this image's project, not "
            f"from upstream releases.")

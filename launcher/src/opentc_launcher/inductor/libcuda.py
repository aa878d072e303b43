"""Triton links its launchers with `-lcuda`, so it needs an unversioned `libcuda.so` in the folders it finds
`libcuda.so.1` in (`ldconfig -p`), or a folder named by TRITON_LIBCUDA_PATH.

The NVIDIA container runtime and SageMaker mount the driver's `libcuda.so.1` (and its versioned file), not always
`libcuda.so`: Triton then fails with "cannot find -lcuda" (pytorch/pytorch#92745). When that is the case, a
folder of this process's own gets a `libcuda.so` link to the mounted library and TRITON_LIBCUDA_PATH names it.
Nothing is written into the driver's folders.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping

LIBRARY = "libcuda.so"


def driver_folders(ldconfig: str = "/sbin/ldconfig") -> list[str]:
    """The folders holding libcuda.so.1, as Triton finds them (`ldconfig -p`); [] without a driver."""
    try:
        listing = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = [line.split()[-1] for line in listing.splitlines() if line.split()[:1] == [f"{LIBRARY}.1"]]
    return list(dict.fromkeys(os.path.dirname(path) for path in found if os.path.exists(path)))


def linkable_libcuda(env: Mapping[str, str], folders: list[str], scratch: str = "") -> dict[str, str]:
    """The variables that let Triton link libcuda: {} when it can already (TRITON_LIBCUDA_PATH set, a libcuda.so
    beside a libcuda.so.1, or no driver at all); else TRITON_LIBCUDA_PATH naming a folder with a libcuda.so link
    to the driver's libcuda.so.1."""
    if env.get("TRITON_LIBCUDA_PATH") or not folders:
        return {}
    if any(os.path.exists(os.path.join(folder, LIBRARY)) for folder in folders):
        return {}
    link_folder = tempfile.mkdtemp(prefix="opentc-libcuda-", dir=scratch or None)
    for name in (LIBRARY, f"{LIBRARY}.1"):
        os.symlink(os.path.join(folders[0], f"{LIBRARY}.1"), os.path.join(link_folder, name))
    return {"TRITON_LIBCUDA_PATH": link_folder}

"""How many GPUs this process can see (the count every launcher and worker checks a device choice against), and what
the first of them is (gpu_model, for the host record: host.py).

Read from NVML, the driver's own library, with CUDA_VISIBLE_DEVICES applied the way torch.cuda.device_count() applies
it when NVML answers (torch/cuda/__init__.py: _parse_visible_devices, _device_count_nvml). Neither torch nor a CUDA
context is touched, so a worker can check its options before the script runs (a script may still set
CUDA_VISIBLE_DEVICES or OMP_NUM_THREADS before its own `import torch`), and `opentc-run` and `opentc-worker` refuse
exactly the same launches.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

NVML_LIBRARY = "libnvidia-ml.so.1"   # mounted with the driver (the NVIDIA container runtime, SageMaker)
_UUID_BYTES = 96
# No host has more GPUs than this (8 and 16 are the most an instance has): a driver that reports more is not believed,
# and its count is none (a loop over 2^31 devices would never end).
MAX_GPUS = 256


def _nvml() -> ctypes.CDLL | None:
    try:
        nvml = ctypes.CDLL(NVML_LIBRARY)
    except OSError:   # no driver
        return None
    return nvml if _answers(nvml, "nvmlInit_v2") else None


def _answers(nvml: ctypes.CDLL, function: str, *args: object) -> bool:
    """Whether NVML has `function` and it answered. Every call goes through here: drivers differ in what their
    library exports (older ones lack the _v2 names, stand-ins export a few), and a question the driver cannot
    answer leaves a figure unknown rather than failing the job."""
    try:
        return bool(getattr(nvml, function)(*args) == 0)
    except AttributeError:
        return False


def _reported_count(nvml: ctypes.CDLL) -> int | None:
    count = ctypes.c_uint(0)
    return count.value if _answers(nvml, "nvmlDeviceGetCount_v2", ctypes.byref(count)) else None


def _device_count(nvml: ctypes.CDLL) -> int:
    count = _reported_count(nvml) or 0
    return count if count <= MAX_GPUS else 0


def implausible_count() -> int | None:
    """The GPU count the driver reports when it is more than any host has (MAX_GPUS), else None."""
    nvml = _nvml()
    count = _reported_count(nvml) if nvml is not None else None
    return count if count is not None and count > MAX_GPUS else None


def _uuids(nvml: ctypes.CDLL) -> list[str]:
    found: list[str] = []
    for index in range(_device_count(nvml)):
        handle = ctypes.c_void_p()
        buffer = ctypes.create_string_buffer(_UUID_BYTES)
        if not _answers(nvml, "nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(handle)) or \
                not _answers(nvml, "nvmlDeviceGetUUID", handle, buffer, _UUID_BYTES):
            return found
        found.append(buffer.value.decode("ascii", "replace"))
    return found


def _leading_number(text: str) -> int:
    """What C's strtoul reads at the start of `text` (CUDA reads "1gpu" as 1); -1 for none or a negative one."""
    found = re.match(r"[+-]?[0-9]+", text)
    return int(found[0]) if found else -1


def _ordinals(entries: list[str], available: int) -> int:
    """The GPUs a list of ordinals selects: the list ends at its first negative entry, a repeated entry selects
    none, and it is cut at the first ordinal past the last GPU."""
    listed: list[int] = []
    for entry in entries:
        number = _leading_number(entry.strip())
        if number in listed:
            return 0
        if number < 0:
            break
        listed.append(number)
    return next((i for i, number in enumerate(listed) if number >= available), len(listed))


def _by_uuid(entries: list[str], uuids: list[str]) -> int:
    """The GPUs a list of (prefixes of) UUIDs selects: it ends at the first that matches no GPU, or more than one."""
    seen: list[int] = []
    for entry in entries:
        matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
        if len(matches) != 1:
            break
        if matches[0] in seen:
            return 0
        seen.append(matches[0])
    return len(seen)


def visible_gpu_count(env: Mapping[str, str] = os.environ) -> int:
    """GPUs this process can see (0 without a driver)."""
    nvml = _nvml()
    if nvml is None:
        return 0
    chosen = env.get("CUDA_VISIBLE_DEVICES")
    if chosen is None:
        return _device_count(nvml)
    entries = chosen.split(",")
    prefix = chosen[:4]
    if prefix in ("GPU-", "MIG-"):   # a list of UUIDs, which ends at the first entry without the prefix
        named = list(itertools.takewhile(lambda entry: entry.startswith(prefix), entries))
        # MIG instances are no NVML devices: CUDA checks those names itself.
        return len(named) if prefix == "MIG-" else _by_uuid(named, _uuids(nvml))
    return _ordinals(entries, _device_count(nvml))


class _Memory(ctypes.Structure):   # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


@dataclass(frozen=True)
class GpuModel:
    """The first GPU as the driver describes it (the GPUs of one instance are alike); a figure the driver did not
    give is None."""
    name: str | None                                  # "NVIDIA H100 80GB HBM3", the name torch gives it too
    memory_mib: int | None
    compute_capability: tuple[int, int] | None


def gpu_model() -> GpuModel | None:
    """The first GPU's name, memory and compute capability, from NVML; None without a driver or a GPU."""
    nvml = _nvml()
    if nvml is None or _device_count(nvml) == 0:
        return None
    handle = ctypes.c_void_p()
    if not _answers(nvml, "nvmlDeviceGetHandleByIndex_v2", 0, ctypes.byref(handle)):
        return None
    buffer = ctypes.create_string_buffer(_UUID_BYTES)
    named = _answers(nvml, "nvmlDeviceGetName", handle, buffer, _UUID_BYTES)
    name = buffer.value.decode("ascii", "replace") if named else None
    memory = _Memory()
    mib = memory.total // 2**20 if _answers(nvml, "nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory)) else None
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    capability = (major.value, minor.value) if _answers(
        nvml, "nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor)) else None
    return GpuModel(name or None, mib, capability)


"""One record of the machine a job runs on, probed once per job: its CPUs, the GPUs this process can see and what
they are, the NVIDIA driver and the CUDA it supports, and the CUDA this torch was built for. The dry run prints it,
the job summary keeps it, and a GPU-specific choice (the MFU's peak, bf16 advice) reads it rather than asking the
driver again.

Nothing here imports torch or creates a CUDA context: the driver's own libraries answer (gpus.py, cuda_driver.py),
in a short-lived child (`python -m opentc_launcher.host`), given DRIVER_TIMEOUT: a driver's library that crashes
(SIGSEGV inside nvmlDeviceGetMemoryInfo) or never answers leaves what it did not say unknown, with the reason, and
never ends the job that asked. The child says each answer as soon as it has it, so what came before a crash is kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .cuda_driver import driver_cuda_version, driver_version, torch_cuda_version
from .gpus import MAX_GPUS, gpu_model, implausible_count, visible_gpu_count

DRIVER_TIMEOUT = 60.0   # seconds: NVML starts in a few on a host of eight GPUs without persistence mode

BF16_FROM = (8, 0)   # bf16 matrix units: Ampere (compute capability 8.0) and later


@dataclass(frozen=True)
class HostFacts:
    cpus: int                                       # the CPUs this process may run on (its affinity)
    gpus: int                                       # GPUs this process can see, CUDA_VISIBLE_DEVICES applied
    gpu_name: str | None = None                     # the first GPU's (an instance's GPUs are alike)
    gpu_memory_mib: int | None = None
    compute_capability: tuple[int, int] | None = None
    driver: str | None = None                       # "580.65.06"
    driver_cuda: tuple[int, int] | None = None      # the newest CUDA the driver supports
    torch_cuda: tuple[int, int] | None = None       # the CUDA this torch was built for; None for a CPU build
    gpu_problem: str | None = None                  # why what the driver says of the GPUs is unknown

    @property
    def bf16(self) -> bool | None:
        """Whether the GPUs multiply in bf16 natively; None where unknown (no GPU, or no compute capability)."""
        return self.compute_capability >= BF16_FROM if self.compute_capability else None

    def record(self) -> dict[str, Any]:
        """The facts as JSON values (the job summary's `machine`); versions as "major.minor" text."""
        def dotted(version: tuple[int, int] | None) -> str | None:
            return f"{version[0]}.{version[1]}" if version else None

        return {"cpus": self.cpus, "gpus": self.gpus, "gpu_name": self.gpu_name,
                "gpu_memory_mib": self.gpu_memory_mib, "compute_capability": dotted(self.compute_capability),
                "bf16": self.bf16, "driver": self.driver, "driver_cuda": dotted(self.driver_cuda),
                "torch_cuda": dotted(self.torch_cuda)}

    def describe(self) -> str:
        """One line: "2 CPUs; no GPU; torch built for CUDA 13.0" or "96 CPUs; 8 x NVIDIA H100 80GB HBM3 (81559 MiB,
        compute capability 9.0, bf16); driver 580.65.06 (CUDA 13.0); torch built for CUDA 13.0"."""
        facts = self.record()
        parts = [f"{self.cpus} CPU{'s' if self.cpus != 1 else ''}"]
        if self.gpus:
            about = [f"{self.gpu_memory_mib} MiB" if self.gpu_memory_mib is not None else "",
                     f"compute capability {facts['compute_capability']}" if self.compute_capability else "",
                     {True: "bf16", False: "no bf16", None: ""}[self.bf16]]
            shown = ", ".join(a for a in about if a)
            parts.append(f"{self.gpus} x {self.gpu_name or 'GPU (name unknown)'}" + (f" ({shown})" if shown else ""))
        else:
            parts.append("no GPU")
        if self.gpu_problem:
            parts[-1] += f" ({self.gpu_problem})"
        if self.driver or self.driver_cuda:
            parts.append(f"driver {self.driver or '(version unknown)'}"
                         + (f" (CUDA {facts['driver_cuda']})" if self.driver_cuda else ""))
        parts.append(f"torch built for CUDA {facts['torch_cuda']}" if self.torch_cuda else "torch built for CPUs")
        return "; ".join(parts)


def probe_host(env: Mapping[str, str] = os.environ, timeout: float = DRIVER_TIMEOUT) -> HostFacts:
    """The machine as this process sees it (`env`'s CUDA_VISIBLE_DEVICES applied). Call once per job."""
    said, problem = _ask_the_driver(env, timeout)
    model = said.get("model") or [None, None, None]
    return HostFacts(
        cpus=len(os.sched_getaffinity(0)), gpus=int(said.get("gpus") or 0),
        gpu_name=model[0], gpu_memory_mib=model[1],
        compute_capability=_pair(model[2]),
        driver=said.get("driver"),
        driver_cuda=_pair(said.get("driver_cuda")),
        torch_cuda=torch_cuda_version(),
        gpu_problem=problem)


def _pair(value: Any) -> tuple[int, int] | None:
    return (int(value[0]), int(value[1])) if value else None


def _ask_the_driver(env: Mapping[str, str], timeout: float) -> tuple[dict[str, Any], str | None]:
    """What the child (_describe) said, and why the rest is unknown (None when it said everything)."""
    child = subprocess.Popen([sys.executable, "-m", "opentc_launcher.host"], env=dict(env), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    problem = None
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        try:   # a call stuck inside the kernel may not even end when killed: it is left behind, not waited for
            out, err = child.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            out, err = b"", b""
        problem = f"unknown: the driver's library did not answer within {timeout:g} s describing the GPU"
    said: dict[str, Any] = {}
    for line in out.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError, TypeError):
            said.update(json.loads(line))
    code = child.returncode
    if problem is None and code is not None and code < 0:
        problem = f"unknown: the driver's library crashed describing the GPU ({signal.Signals(-code).name})"
    elif problem is None and code:
        last = (err.decode("utf-8", "replace").strip().splitlines() or ["no word"])[-1][:200]
        problem = f"unknown: describing the GPU failed (exit code {code}: {last})"
    if said.get("implausible"):
        problem = (f"unknown: the driver reported {said['implausible']} GPUs, more than any host has (at most "
                   f"{MAX_GPUS} are believed)")
    return said, problem


def _describe() -> None:
    """The child: each answer on a line of its own, as soon as it is known (a crash keeps those before it)."""
    def say(key: str, value: Any) -> None:
        print(json.dumps({key: value}), flush=True)

    implausible = implausible_count()
    if implausible is not None:
        say("implausible", implausible)
    gpus = visible_gpu_count(os.environ)
    say("gpus", gpus)
    say("driver", driver_version())
    cuda = driver_cuda_version()
    say("driver_cuda", list(cuda) if cuda else None)
    if gpus:
        model = gpu_model()
        say("model", [model.name, model.memory_mib, list(model.compute_capability or ()) or None] if model else None)


if __name__ == "__main__":
    _describe()

"""One record of the machine a job runs on, probed once per job: its CPUs, the GPUs this process can see and what
they are, the NVIDIA driver and the CUDA it supports, and the CUDA this torch was built for. The dry run prints it,
the job summary keeps it, and a GPU-specific choice (the MFU's peak, bf16 advice) reads it rather than asking the
driver again.

Nothing here imports torch or creates a CUDA context: the driver's own libraries answer (gpus.py, cuda_driver.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .cuda_driver import driver_cuda_version, driver_version, torch_cuda_version
from .gpus import gpu_model, visible_gpu_count

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
        if self.driver or self.driver_cuda:
            parts.append(f"driver {self.driver or '(version unknown)'}"
                         + (f" (CUDA {facts['driver_cuda']})" if self.driver_cuda else ""))
        parts.append(f"torch built for CUDA {facts['torch_cuda']}" if self.torch_cuda else "torch built for CPUs")
        return "; ".join(parts)


def probe_host(env: Mapping[str, str] = os.environ) -> HostFacts:
    """The machine as this process sees it (`env`'s CUDA_VISIBLE_DEVICES applied). Call once per job."""
    gpus = visible_gpu_count(env)
    model = gpu_model() if gpus else None
    return HostFacts(
        cpus=len(os.sched_getaffinity(0)), gpus=gpus,
        gpu_name=model.name if model else None,
        gpu_memory_mib=model.memory_mib if model else None,
        compute_capability=model.compute_capability if model else None,
        driver=driver_version(),
        driver_cuda=driver_cuda_version(),
        torch_cuda=torch_cuda_version())

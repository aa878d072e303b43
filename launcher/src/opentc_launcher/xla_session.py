"""Everything a worker does to PyTorch/XLA before and after the user's script."""

from __future__ import annotations

import logging
import os
from typing import MutableMapping, Optional

from .options import WorkerOptions
from .runtime import (
    WorkerIdentity,
    check_cpu_multi_worker,
    resolve_xla_device,
    xla_runtime_env,
)

log = logging.getLogger("opentc_launcher")


class XlaSession:
    """The XLA runtime of one worker: configured, imported and (with several workers) grouped."""

    def __init__(self, options: WorkerOptions, identity: WorkerIdentity, device: str):
        self.options = options
        self.identity = identity
        self.device = device

    @classmethod
    def start(cls, options: WorkerOptions, identity: WorkerIdentity,
              environ: MutableMapping[str, str]) -> "XlaSession":
        device = resolve_xla_device(options.xla_device, environ)
        warning = check_cpu_multi_worker(device, identity.world_size, options.cpu_multi_worker)
        if warning:
            log.warning("rank %d: %s", identity.rank, warning)
        # The worker's own process: torch_xla reads these at import, below.
        environ.update(xla_runtime_env(device, identity, environ))
        session = cls(options, identity, device)
        import torch_xla  # noqa: F401  (after the environment is final)

        if identity.world_size > 1 and device != "CPU":
            session._init_process_group()
        log.info("rank %d/%d: PyTorch/XLA ready on PJRT_DEVICE=%s", identity.rank, identity.world_size, device)
        return session

    def _init_process_group(self) -> None:
        init_xla_process_group()

    def finish(self, exit_code: int) -> Optional[int]:
        """Called after the script, however it ended; may turn success into failure (returns a new exit code)."""
        if os.environ.get("XLA_METRICS_FILE"):
            # torch-xla appends a report to XLA_METRICS_FILE only from xm.mark_step(), not from
            # torch_xla.sync(): a last report here means debug mode always leaves one.
            import torch_xla.debug.metrics_saver as metrics_saver

            metrics_saver.save_metrics()
        return None


def init_xla_process_group() -> None:
    """The default torch.distributed group on the `xla` backend, as torch-xla's docs have scripts do.

    Scripts that also call `init_process_group("xla")` themselves (the documented pattern, and what
    transformers does) would fail with "initialize the default process group twice": a second call
    for the backend already in place is made a no-op.
    """
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401  (registers the backend and xla://)

    if not dist.is_initialized():
        dist.init_process_group("xla", init_method="xla://")
    original = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        if dist.is_initialized() and backend is not None and str(backend).lower() == dist.get_backend():
            log.info("torch.distributed is already initialised on %s by the launcher; "
                     "ignoring the script's init_process_group", backend)
            return None
        return original(backend, *args, **kwargs)

    dist.init_process_group = init_process_group


"""Everything a worker does to PyTorch/XLA before and after the user's script."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, MutableMapping

from . import exit_codes
from .cache import open_cache
from .diagnostics import (
    SHAPES_FIX,
    CompileMonitor,
    CompileTimeline,
    StepCounter,
    build_report,
    write_compile_report,
)
from .errors import record_error
from .library_patches import install as install_library_patches
from .library_patches import replace_once
from .options import WorkerOptions
from .runtime import WorkerIdentity, xla_runtime_env

log = logging.getLogger("opentc_launcher")


class XlaSession:
    """The XLA runtime of one worker: configured, imported and (with several workers) grouped."""

    def __init__(self, options: WorkerOptions, identity: WorkerIdentity, process: str):
        self.options = options
        self.identity = identity
        self.process = process   # rank<N>, or rank<N>-spawned<K>: names its report and cache folder
        self.cache: dict = {"dir": "", "mode": "off"}
        self.monitor: CompileMonitor | None = None
        self.steps: StepCounter | None = None
        self._stopping = threading.Lock()

    @property
    def device(self) -> str:
        return self.options.xla_device

    @classmethod
    def start(cls, options: WorkerOptions, identity: WorkerIdentity,
              environ: MutableMapping[str, str]) -> XlaSession:
        """Apply the launch's decision (options.xla_device) to this process and import torch_xla."""
        if options.xla_device == "CUDA":
            # Before torch-xla touches the plugin: a mismatch stops here, naming both versions.
            from .xla_cuda import check_cuda_plugin, check_driver, driver_cuda_version

            check_cuda_plugin()
            check_driver(driver_cuda_version())
        # The worker's own process: torch_xla reads these at import, below.
        environ.update(xla_runtime_env(options, identity, environ))
        session = cls(options, identity, f"rank{identity.rank}")
        import torch_xla  # noqa: F401  (after the environment is final)

        keep_parameters_on_move(True)
        session._prepare()
        if identity.world_size > 1 and options.xla_device != "CPU":
            init_xla_process_group()
        from .spawned import follow_spawned_processes

        follow_spawned_processes(options, identity)
        log.info("rank %d/%d: PyTorch/XLA ready on PJRT_DEVICE=%s; modules keep their parameters (and tied "
                 "weights) when moved to XLA: %s(True)", identity.rank, identity.world_size, options.xla_device,
                 SWAP_SWITCH)
        return session

    @classmethod
    def attach(cls, options: WorkerOptions, identity: WorkerIdentity, process: str,
               keep_parameters: bool) -> XlaSession:
        """The diagnostics of a process the script started (torch_xla.launch, xmp.spawn), inside it: torch-xla
        is imported and configured there already. `keep_parameters`: the starting process's switch, at launch."""
        keep_parameters_on_move(keep_parameters)
        session = cls(options, identity, process)
        session._prepare()
        return session

    def _prepare(self) -> None:
        """The persistent cache, the step counter, the compile monitor and the library patches, before the
        first computation."""
        options = self.options
        if options.library_patches:
            install_library_patches()
        if options.compile_cache_dir:
            self.cache = open_cache(options.compile_cache_dir, options.xla_device, self.process)
        if options.compile_report_dir or options.max_compilations:
            self.steps = StepCounter().install()
            self.monitor = CompileMonitor(self.process, options.warmup_steps, options.max_compilations,
                                          on_limit=self._compilation_limit_reached, step_counter=self.steps)
            self.monitor.start()
            self._after_each_sync(self.monitor.after_sync)

    @staticmethod
    def _after_each_sync(callback: Callable[[], None]) -> None:
        """Call `callback` right after every sync (torch_xla.sync, xm.mark_step, MpDeviceLoader's): each goes
        through torch-xla's step marker, which compiles the step's graph before it returns."""
        import torch_xla

        xlac = torch_xla._XLAC
        step_marker = xlac._xla_step_marker

        def step_marker_then_callback(*args, **kwargs):
            result = step_marker(*args, **kwargs)
            callback()
            return result

        replace_once(xlac, "_xla_step_marker", step_marker_then_callback)

    def _report(self, exit_code: int, timeline: CompileTimeline) -> None:
        report = build_report(self.process, self.identity.rank, self.identity.world_size, self.device, exit_code,
                              timeline, self.cache, self.steps)
        path = write_compile_report(report, self.options.compile_report_dir)
        for line in report.summary_lines():
            (log.warning if report.findings else log.info)("%s", line)
        if path:
            log.info("%s: compile report written to %s", self.process, path)

    def _compilation_limit_reached(self, compiles: int) -> None:
        """Stop this worker now, with a report and a clear reason (from the monitor thread or after a sync)."""
        if not self._stopping.acquire(blocking=False):
            threading.Event().wait()   # the other thread is writing the report and ends the process
        message = (f"compilation limit reached: {compiles} graphs compiled, more than the "
                   f"{self.options.max_compilations} allowed (hyperparameter "
                   f"sagemaker_training_compiler_max_compilations, or --max-compilations). Shapes are "
                   f"probably changing between steps; to fix: {SHAPES_FIX}.")
        log.error("%s: %s", self.process, message)
        assert self.monitor is not None
        self._report(exit_codes.COMPILATION_LIMIT, self.monitor.timeline)
        record_error(message, "", exit_codes.COMPILATION_LIMIT)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_codes.COMPILATION_LIMIT)   # the main thread may be inside a compilation: do not wait

    def finish(self, exit_code: int) -> None:
        """After the script, however it ended: the compile report, and debug mode's last metrics."""
        if self.monitor is not None:
            timeline = self.monitor.stop()
            if self.options.compile_report_dir:
                self._report(exit_code, timeline)
        if os.environ.get("XLA_METRICS_FILE"):
            # torch-xla appends a report to XLA_METRICS_FILE only from xm.mark_step(), not from
            # torch_xla.sync(): a last report here means debug mode always leaves one.
            import torch_xla.debug.metrics_saver as metrics_saver

            metrics_saver.save_metrics()


SWAP_SWITCH = "torch.__future__.set_swap_module_params_on_conversion"


def keep_parameters_on_move(keep: bool) -> None:
    """torch's own switch for `Module.to()` / `_apply`: with it on, each parameter's contents are swapped in
    place (torch.utils.swap_tensors) instead of the module getting a new Parameter. Without it, moving a model to
    XLA unties tied weights (GPT-2's lm_head and wte become two parameters that train apart, and saving keeps only
    one) and leaves an optimizer created before the move holding the old CPU tensors. Set before the script
    runs, so a script that sets it itself (to False, say) has the last word."""
    import torch

    torch.__future__.set_swap_module_params_on_conversion(keep)


def parameters_kept_on_move() -> bool:
    import torch

    return bool(torch.__future__.get_swap_module_params_on_conversion())


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

"""Everything a worker does to PyTorch/XLA before and after the user's script, starting with the variables its own
process needs before torch_xla is imported: the launch's device in PJRT's words, debug mode's switches (the worker
option --debug-mode arrives here and goes no further), and the per-rank files of torch-xla's debug artefacts."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from ..compile_progress import DEFAULT_NAME as PROGRESS
from ..compile_progress import CompileProgress, every
from ..compile_report import CompileReport, limit_message
from ..env_values import keep_theirs
from ..identity import WorkerIdentity, per_rank_files
from ..options import WorkerOptions
from ..patching import LAUNCH, OBSERVER, LibraryChange
from ..replace import replace_once
from ..worker_session import WorkerSession
from .cache import open_cache
from .diagnostics import CompileMonitor, StepActivity, build_report, graphs_compiled
from .library_patches import install as install_library_patches
from .loss_scaling import LossScalingWatch
from .parameters import SWAP_SWITCH, keep_parameters_on_move
from .spawned import follow_spawned_processes, processes_started

log = logging.getLogger("opentc_launcher")

# PJRT's names for the launch's devices.
PJRT_DEVICES = {"cuda": "CUDA", "cpu": "CPU", "tpu": "TPU"}
# Debug artefacts that torch-xla writes to one fixed path: with several workers each needs its own file.
PER_RANK_FILE_VARIABLES = ("XLA_SAVE_TENSORS_FILE", "XLA_METRICS_FILE", "PT_XLA_DEBUG_FILE")
# XLA reads each whitespace-separated --name=value of this variable: a user's own value gets debug mode's flags it
# lacks (theirs win for a flag both set), rather than being kept whole in place of them.
FLAG_LIST = "XLA_FLAGS"


def pjrt_device(options: WorkerOptions) -> str:
    return PJRT_DEVICES[options.device]


def debug_environment(folder: str) -> dict[str, str]:
    """torch-xla's debug and dump switches, with every artefact under `folder`."""
    return {
        "PT_XLA_DEBUG_LEVEL": "1",           # compilation analysis: why each graph was compiled
        "XLA_IR_DEBUG": "1",                 # Python frames in the IR ...
        "XLA_HLO_DEBUG": "1",                # ... and in the HLO metadata
        "XLA_SAVE_TENSORS_FILE": os.path.join(folder, "XLA_SAVE_TENSORS_FILE.hlo"),
        "XLA_SAVE_TENSORS_FMT": "hlo",
        "XLA_METRICS_FILE": os.path.join(folder, "XLA_METRICS_FILE.txt"),
        "XLA_DUMP_FATAL_STACK": "1",
        FLAG_LIST: f"--xla_dump_to={os.path.join(folder, 'xla_dump')}",
    }


def debug_switches(folder: str, env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """debug_environment settled against `env` (env_values.keep_theirs): the user's values kept, their XLA_FLAGS
    given the flags of ours it lacks."""
    return keep_theirs(debug_environment(folder), env, frozenset({FLAG_LIST}))


@dataclass(frozen=True)
class RuntimeEnvironment:
    """What the worker sets in its own environment, and what it found set and kept (lines for its log)."""

    updates: dict[str, str]
    kept: tuple[str, ...] = ()


def xla_runtime_env(options: WorkerOptions, identity: WorkerIdentity, env: Mapping[str, str]) -> RuntimeEnvironment:
    """Variables this worker's own process needs before torch_xla is imported, for the device the launch
    decided and, in debug mode, torch-xla's debug switches (a variable `env` already sets is kept).

    torch-xla reads its configuration from the process environment at import time, so the worker sets
    these in its own `os.environ` (they also reach any process the script starts, such as the children of
    `torch_xla.launch`, which is what the script expects).
    """
    updates = {"PJRT_DEVICE": pjrt_device(options)}
    # The PJRT GPU client reads PJRT_LOCAL_PROCESS_RANK (some builds do not fall back to LOCAL_RANK).
    updates["PJRT_LOCAL_PROCESS_RANK"] = env.get("PJRT_LOCAL_PROCESS_RANK", str(identity.local_rank))
    if identity.world_size > 1:
        updates["PJRT_LOCAL_PROCESS_COUNT"] = env.get("PJRT_LOCAL_PROCESS_COUNT", str(identity.local_world_size))
    kept: tuple[str, ...] = ()
    if options.debug_mode:
        switches, kept = debug_switches(options.debug_folder(), env)
        updates.update(switches)
    updates.update(per_rank_files(PER_RANK_FILE_VARIABLES, identity, {**env, **updates}))
    return RuntimeEnvironment(updates, kept)


class XlaSession(WorkerSession):
    """The XLA runtime of one worker: configured, imported and (with several workers) grouped."""

    compiles = True

    def __init__(self, options: WorkerOptions, identity: WorkerIdentity, process: str):
        super().__init__(options, identity, process)
        self.cache: dict = {"dir": "", "mode": "off"}
        self.monitor: CompileMonitor | None = None
        self.activity = StepActivity()
        self.loss_scaling = LossScalingWatch()
        self.progress = CompileProgress(self.process, every(options.compile_progress_seconds, options.is_off(PROGRESS)))

    @property
    def device(self) -> str:
        return pjrt_device(self.options)

    @property
    def device_type(self) -> str:
        return "xla"

    @classmethod
    def prepare(cls, options: WorkerOptions, identity: WorkerIdentity,
                environ: MutableMapping[str, str]) -> XlaSession:
        """Apply the launch's decision (options.device) to this process and import torch_xla."""
        if options.device == "cuda":
            # Before torch-xla touches the plugin: a mismatch stops here, naming both versions.
            from ..cuda_driver import driver_cuda_version
            from .cuda import check_cuda_plugin, check_driver

            check_cuda_plugin()
            check_driver(driver_cuda_version())
        # The worker's own process: torch_xla reads these at import, below.
        runtime = xla_runtime_env(options, identity, environ)
        environ.update(runtime.updates)
        session = cls(options, identity, f"rank{identity.rank}")
        for line in runtime.kept:
            log.info("%s: found pre-existing configuration %s", session.process, line)
        import torch_xla  # noqa: F401  (after the environment is final)

        keep_parameters_on_move(True)
        session.start()
        if identity.world_size > 1 and options.device != "cpu":
            init_xla_process_group()
        follow_spawned_processes(options, identity, XlaSession.attach)
        log.info("rank %d/%d: PyTorch/XLA ready on PJRT_DEVICE=%s; modules keep their parameters (and tied "
                 "weights) when moved to XLA: %s(True)", identity.rank, identity.world_size, session.device,
                 SWAP_SWITCH)
        return session

    @classmethod
    def attach(cls, options: WorkerOptions, identity: WorkerIdentity, process: str,
               keep_parameters: bool) -> XlaSession:
        """The worker's set-up in a process the script started (torch_xla.launch, xmp.spawn), inside it: torch-xla
        is imported and configured there already. `keep_parameters`: the starting process's switch, at launch."""
        keep_parameters_on_move(keep_parameters)
        session = cls(options, identity, process)
        session.start()
        return session

    def start(self) -> None:
        """The library patches, the persistent cache, the step counter and the compile monitor, before the first
        computation."""
        super().start()
        self.loss_scaling.install()
        options = self.options
        if options.library_patches:
            install_library_patches()
        if options.compile_cache_dir:
            self.cache = open_cache(options.compile_cache_dir, self.device, self.process)
        if options.compile_report_dir or options.max_compilations:
            self.monitor = CompileMonitor(self.process, options.warmup_steps, options.max_compilations,
                                          on_limit=self._compilation_limit_reached, step_counter=self.steps)
            self.monitor.start()
        self._around_each_sync()

    def after_step(self, step: int) -> None:
        self.activity.after_step()

    def _around_each_sync(self) -> None:
        """Around every sync (torch_xla.sync, xm.mark_step, MpDeviceLoader's), which goes through torch-xla's step
        marker and compiles the step's graph before it returns (releasing the GIL): the compile progress before and
        after it, and the compile monitor after it."""
        import torch_xla

        xlac = torch_xla._XLAC
        step_marker = xlac._xla_step_marker
        monitor, progress, steps = self.monitor, self.progress, self.steps

        def step_marker_between(*args: Any, **kwargs: Any) -> Any:
            before = graphs_compiled()
            step = f"optimizer step {steps.steps}'s graph" if steps.steps else "the first sync's graph"
            progress.started(f"{step} (XLA compiling it, or running it)")
            try:
                return step_marker(*args, **kwargs)
            finally:
                progress.ended(counted=graphs_compiled() > before)
                if monitor is not None:
                    monitor.after_sync()

        replace_once(xlac, "_xla_step_marker", step_marker_between)

    def _build_report(self, exit_code: int) -> CompileReport:
        assert self.monitor is not None
        report = build_report(self.process, self.identity.rank, self.identity.world_size, self.device, exit_code,
                              self.monitor.timeline, self.cache, self.steps, self.activity, self.loss_scaling,
                              processes_started())
        report.details["compile_timeline"] = list(self.progress.timeline)
        return report

    def _compilation_limit_reached(self, compiles: int) -> None:
        """The compile monitor saw the limit passed (from its thread, or after a sync)."""
        self.stop_at_compilation_limit(limit_message(compiles, self.options.max_compilations), self._build_report)

    def compiled_at(self) -> list[float]:
        return self.monitor.timeline.compiled_at if self.monitor is not None else []

    def compile_report(self, exit_code: int) -> CompileReport | None:
        if self.monitor is None:
            return None
        self.monitor.stop()
        if exit_code == 0:
            # Executions are counted when they run, after the sync that dispatched them: a script that ends
            # right after its last sync still has one queued. Only on success: a failed or stopped worker must
            # not wait on a device that may be what went wrong.
            import torch_xla.core.xla_model as xm

            xm.wait_device_ops()
        return self._build_report(exit_code) if self.options.compile_report_dir else None

    def peak_memory(self) -> tuple[float, str]:
        """XLA's runtime peak on a GPU or TPU; on XLA:CPU the tensors live in the process's memory."""
        if self.options.device != "cpu":
            import torch_xla
            import torch_xla.core.xla_model as xm

            try:
                return xm.get_memory_info(torch_xla.device())["peak_bytes_used"] / 2**20, "XLA runtime's peak"
            except (KeyError, RuntimeError, TypeError):
                pass
        return super().peak_memory()

    def device_memory(self) -> float | None:
        """XLA's runtime limit on a GPU; None on XLA:CPU."""
        if self.options.device != "cpu":
            import torch_xla
            import torch_xla.core.xla_model as xm

            try:
                return xm.get_memory_info(torch_xla.device())["bytes_limit"] / 2**20
            except (KeyError, RuntimeError, TypeError):
                pass
        return None

    def finish(self, exit_code: int) -> None:
        """After the script, however it ended: the compile report, and debug mode's last metrics."""
        super().finish(exit_code)
        if self.options.debug_mode and os.environ.get("XLA_METRICS_FILE"):
            # torch-xla appends a report to XLA_METRICS_FILE only from xm.mark_step(), not from
            # torch_xla.sync(): a last report here means debug mode always leaves one.
            import torch_xla.debug.metrics_saver as metrics_saver

            metrics_saver.save_metrics()


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

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if dist.is_initialized() and backend is not None and str(backend).lower() == dist.get_backend():
            log.info("torch.distributed is already initialised on %s by the launcher; "
                     "ignoring the script's init_process_group", backend)
            return None
        return original(backend, *args, **kwargs)

    replace_once(dist, "init_process_group", init_process_group)


STEP_MARKER = LibraryChange(
    name="xla-syncs-seen", module="torch_xla", target="torch_xla._XLAC._xla_step_marker", kind=OBSERVER, backend="xla",
    apply=XlaSession._around_each_sync,
    why="each sync (torch_xla.sync, xm.mark_step), around which the compile progress says what compiles for long, "
        "and after which the compile monitor counts the graphs compiled (and stops a worker past --max-compilations)",
    unpatched="no compile progress, no compile report, and no compilation limit")
PROCESS_GROUP_KEPT = LibraryChange(
    name="xla-process-group-kept", module="torch.distributed", target="torch.distributed.init_process_group",
    kind=LAUNCH, backend="xla", apply=init_xla_process_group,
    why="several XLA workers on GPUs (or TPUs) are put in an xla process group by the launcher; a script's own "
        "init_process_group for that backend, as torch-xla's docs have scripts do, is then taken as done",
    unpatched="a script that calls init_process_group('xla') fails: the default process group is initialised twice")

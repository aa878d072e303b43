"""Shared helpers: job folders laid out as SageMaker writes /opt/ml, and the real `train` entry run on them."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_JOB = REPO / "sample" / "job"
SCRIPTS = Path(__file__).resolve().parent / "scripts"
BIN = Path(sys.executable).parent
# The image's `train` is opentc-train (first on its PATH); sagemaker-training's own `train` reaches the same
# entry through this variable.
TRAIN = BIN / "opentc-train"
TRAINING_MODULE = "opentc_toolkit.entry:main"

# The modules that take minutes on a 2-core machine, longest first (the Inductor suite inside the inductor image about
# 6 min; those here 2 to 7 min each, in one process). dev/test runs the tests in two processes, a module at a time in
# each, in this order (--no-loadscope-reorder): the long ones start first and the short ones fill in beside them, so
# that the two processes end together rather than one long module running alone at the end. pytest-xdist gives a
# process whose first module has at most two tests a second module at once, to run after it: the in-image suite (one
# test, about 6 min) gets the third here, so the third is a short one (test_image.py, about 30 s; test_sdk.py there
# kept the container tests at 477 s where 415 s was their half).
LONGEST_FIRST = ("test_inductor_suite.py", "test_jobs.py", "test_image.py", "test_sharded.py", "test_sdk.py",
                 # tests/container above
                 "test_aws_examples.py", "test_inductor.py", "test_compile_time.py", "test_notebooks.py",
                 "test_distributions.py", "test_compile_report.py", "test_same_model.py", "test_hf_trainer.py",
                 "test_distributed.py", "test_xla_cuda.py", "test_inductor_cache.py", "test_gpu_kit.py",
                 "test_trl_sft.py", "test_xla_checkpoint.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)   # stable: each module's tests keep their order


# Variables from the caller's shell that would change what a job does; every test starts without them.
# TORCHINDUCTOR_ and TRITON_ too: torch sets TORCHINDUCTOR_CACHE_DIR in os.environ when a test imports its compiler
# in this process, and a job that inherited it would share one Inductor cache with every later job.
_SCRUBBED_PREFIXES = ("SM_", "SAGEMAKER_", "PJRT_", "XLA_", "PT_XLA_", "OPENTC_", "TORCHELASTIC_", "PET_",
                      "TORCHINDUCTOR_", "TRITON_")
_SCRUBBED = {"USE_TORCH_XLA", "GPU_NUM_DEVICES", "TORCH_WARM_POOL", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK",
             "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "CURRENT_HOST"}


# The g++ every job's Inductor runs: g++ behind the run's memo (tests/gxx_memo.py), set by gxx_memo below.
_COMPILER_ENV: dict[str, str] = {}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(_COMPILER_ENV)
    env.update(extra)
    return env


@pytest.fixture(scope="session", autouse=True)
def gxx_memo(tmp_path_factory):
    """One memo of g++'s builds for the whole test run, shared by its pytest processes (their base folders' parent):
    a kernel Inductor has had built once in this run is not built again (why and how: tests/gxx_memo.py). A test
    that sets CXX itself gets its own compiler. OPENTC_TEST_GXX_MEMO=off: g++ as it is."""
    real = shutil.which("g++")
    if os.environ.get("OPENTC_TEST_GXX_MEMO") == "off" or not real:
        yield None
        return
    folder = shared_folder(tmp_path_factory, "gxx-memo")
    wrapper = folder / "g++"
    written = folder / f".g++-{os.getpid()}"     # each process writes the same file; a rename replaces it whole
    written.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).parent / "gxx_memo.py"}" "$@"\n')
    written.chmod(0o755)
    written.replace(wrapper)
    _COMPILER_ENV.update(CXX=str(wrapper), GXX_MEMO_DIR=str(folder / "builds"), GXX_MEMO_REAL=real)
    yield folder
    _COMPILER_ENV.clear()


def shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder of this test run's, the same for all its pytest processes (their base folders' parent)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def run_once(tmp_path_factory):
    """run_once(name, make) -> folder: `make(folder)` done once in this test run, by whichever of its pytest
    processes asks first; a process asking meanwhile waits for it (a lock). For a job that several tests only read
    (the sample job, compiler off or on): it costs the run one job, not one per test. A `make` that raised leaves
    no result, and the next asker makes it again (and fails the same way, in its own test)."""
    shared = shared_folder(tmp_path_factory, "run-once")

    def run(name: str, make: Callable[[Path], None]) -> Path:
        folder = shared / name
        with open(shared / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)    # released when the file closes, or when a process dies holding it
            if not (folder / ".made").exists():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                make(folder)
                (folder / ".made").touch()
        return folder

    return run


def sdk_encode(values: dict) -> dict[str, str]:
    """hyperparameters.json as the SageMaker SDK writes it: every value JSON-encoded into a string."""
    return {str(k): json.dumps(v) for k, v in values.items()}


class SilentServer:
    """A program that listens on 127.0.0.1, accepts every connection and never answers: an index behind a dead
    proxy, another service holding a rendezvous port."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        self.connected = threading.Event()
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.held.append(conn)
            self.connected.set()

    def close(self):
        for conn in self.held:
            conn.close()
        self.server.close()


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` behind a read-only bind mount of itself, as a volume mounted read-only is (root ignores file modes,
    not a read-only mount). Needs root, as CI has."""
    if os.getuid() != 0:
        pytest.skip("a read-only bind mount needs root (dev/test runs as root in CI)")
    for argv in (["mount", "--bind", str(folder), str(folder)], ["mount", "-o", "remount,bind,ro", str(folder)]):
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            subprocess.run(["umount", str(folder)], stderr=subprocess.DEVNULL)
            pytest.fail(f"{' '.join(argv)} failed (needed for this test): {done.stdout.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def no_torch_xla(folder: Path) -> str:
    """A PYTHONPATH entry whose sitecustomize makes `import torch_xla` fail in every process that uses it: an
    environment without torch-xla (the inductor image, a GPU machine with a newer torch) on this machine."""
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class NoTorchXla(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'torch_xla' or name.startswith('torch_xla.'):\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "sys.meta_path.insert(0, NoTorchXla())\n")
    return str(folder)


def launch_context(gpus: int = 0, world: int = 1, env: dict[str, str] | None = None):
    """What a launch is decided by, on a host of `gpus` GPUs (a number: no GPU here; decision.decide)."""
    from opentc_launcher.host import HostFacts
    from opentc_launcher.launch_context import LaunchContext

    return LaunchContext(HostFacts(cpus=2, gpus=gpus), world, env or {})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Job:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "input" / "config"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def output(self) -> Path:
        return self.root / "output"

    @property
    def compiler_output(self) -> Path:
        return self.output / "data" / "compiler"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def failure(self) -> str | None:
        path = self.output / "failure"
        return path.read_text() if path.exists() else None

    @property
    def succeeded(self) -> bool:
        return (self.output / "success").exists()

    def hyperparameters(self) -> dict:
        return json.loads((self.config / "hyperparameters.json").read_text())

    def write_hyperparameters(self, raw: dict[str, str]) -> None:
        (self.config / "hyperparameters.json").write_text(json.dumps(raw, indent=2))

    def drop_script_hyperparameters(self) -> None:
        """Keep only the sagemaker_* keys: the sample script's own arguments are not for another script."""
        self.write_hyperparameters({k: v for k, v in self.hyperparameters().items() if k.startswith("sagemaker_")})

    def set_hyperparameters(self, **values) -> None:
        """Add or replace hyperparameters, encoded as the SDK encodes them."""
        self.write_hyperparameters({**self.hyperparameters(), **sdk_encode(values)})

    def set_hosts(self, hosts: list[str], current: str) -> None:
        config = json.loads((self.config / "resourceconfig.json").read_text())
        config.update(current_host=current, hosts=hosts)
        config["instance_groups"][0]["hosts"] = hosts
        (self.config / "resourceconfig.json").write_text(json.dumps(config))

    def use_script(self, name: str) -> None:
        """Put tests/scripts/<name> into the code folder (with its siblings) and make it the entry point."""
        source = SCRIPTS / name
        target = self.root / "code" / name
        if source.parent != SCRIPTS:
            shutil.copytree(source.parent, target.parent, dirs_exist_ok=True)
        shutil.copy(source, target)
        self.set_hyperparameters(sagemaker_program=name)

    def read_json(self, relative: str):
        return json.loads((self.root / relative).read_text())

    def compile_report(self, rank: int = 0):
        return json.loads((self.compiler_output / f"compile-report-rank{rank}.json").read_text())


@dataclass
class TrainResult:
    returncode: int
    output: str
    seconds: float


def train_env(job: Job, **extra: str) -> dict[str, str]:
    return clean_env(SAGEMAKER_BASE_DIR=str(job.root), SAGEMAKER_TRAINING_MODULE=TRAINING_MODULE, **extra)


def run_train(job: Job, timeout: float = 600, command: Path | None = None, **extra_env: str) -> TrainResult:
    """The image's command, `train`, on this job folder; stdout and stderr together, as CloudWatch has them."""
    started = time.monotonic()
    proc = subprocess.run([str(command or TRAIN)], env=train_env(job, **extra_env), cwd=str(job.root),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return TrainResult(proc.returncode, proc.stdout, time.monotonic() - started)


def logged_failure(output: str) -> str:
    """What `train` logged after "Reporting training FAILURE": the failure reason, which must end the log."""
    assert "Reporting training FAILURE\n" in output, output[-3000:]
    after = output.split("Reporting training FAILURE\n", 1)[1]
    return after.split(" ERROR    ", 1)[1]


def start_train(job: Job, log_path: Path, **extra_env: str) -> subprocess.Popen:
    with open(log_path, "w") as log:   # the child keeps its own copy of the descriptor
        return subprocess.Popen([str(TRAIN)], env=train_env(job, **extra_env), cwd=str(job.root),
                                stdout=log, stderr=subprocess.STDOUT, text=True)


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None,
             log_path: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    log = log_path.read_text() if log_path and log_path.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{log[-4000:]}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def new_job(root: Path, script: str | None = None, **hyperparameters) -> Job:
    """The one way the tests build a job: a copy of the sample job folder (tiny GPT-2, compiler on) at `root`; with
    `script`, tests/scripts/<script> is its entry point instead of the sample's (whose arguments are dropped); and
    `hyperparameters` set as the SDK encodes them."""
    shutil.copytree(SAMPLE_JOB, root)
    job = Job(root)
    if script:
        job.use_script(script)
        job.drop_script_hyperparameters()
    if hyperparameters:
        job.set_hyperparameters(**hyperparameters)
    return job


SAMPLE_EAGER_WARMUP = 3
SAMPLE_STEPS = int(json.loads(Job(SAMPLE_JOB).hyperparameters()["max_steps"]))


def sample_run(run_once, compiler: bool) -> tuple[Job, TrainResult]:
    """The sample job as it is (SAMPLE_STEPS steps), compiler off or on (XLA:CPU), run once in this test run for the
    tests that read it. Off, with a warm-up of 3 steps (a worker setting that reaches the workers with the compiler off
    too)."""
    def make(folder: Path) -> None:
        job = new_job(folder / "job", sagemaker_training_compiler_enabled=compiler)
        if not compiler:
            job.set_hyperparameters(sagemaker_training_compiler_warmup_steps=SAMPLE_EAGER_WARMUP)
        (folder / "result.json").write_text(json.dumps(asdict(run_train(job))))

    folder = run_once(f"sample-{'xla' if compiler else 'eager'}", make)
    return Job(folder / "job"), TrainResult(**json.loads((folder / "result.json").read_text()))


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time: equal before and after, nothing was written."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture
def make_job(tmp_path):
    """new_job in this test's folder: make_job(), make_job("algo-1"), make_job(script="crash.py", epochs=2)."""
    counter = iter(range(100))

    def make(name: str = "", script: str | None = None, **hyperparameters) -> Job:
        return new_job(tmp_path / (name or f"job{next(counter)}"), script, **hyperparameters)

    return make

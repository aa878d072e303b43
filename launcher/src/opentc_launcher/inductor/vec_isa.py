"""Inductor's check of the CPU's vector instructions, run once per torch, C++ compiler and CPU, and skipped after.

Before Inductor uses a vector instruction set on a CPU, it builds a test library for each set the CPU reports and
loads it in a fresh Python process (torch/_inductor/cpu_vec_isa.py), again in every process: on torch 2.7 two
subprocesses that each import torch, about 4 s of a warm job. TORCHINDUCTOR_VEC_ISA_OK=1 skips the check, but a
compiler that cannot build a reported set then fails instead of falling back. So the first job runs torch's own
check (before its first compilation, where it would have run anyway) and keeps what it found, the proof, in the
Inductor cache folder; a later job on the same torch, compiler and CPU skips the check when every reported set
passed. The setting is part of Inductor's cache key: the first job sets it as soon as the proof holds, before
anything is compiled, so a warm job with the check skipped finds the kernels the cold one compiled.

The first job's check is most of its first compilation's wait (on torch 2.7, 2-core CPU: 20 s of a tiny graph's
21 s, each set built and loaded in turn), so it runs in a process of its own from the worker's start
(`Prover`, vec_isa_prover.py), beside the script's imports and data loading: the same check of torch's, its sets
checked at once instead of in turn, at a low priority. The worker's first compilation waits for it (at most
PROVER_WAIT_SECONDS); where it did not finish, torch's check runs in the worker as before.

With the check skipped, torch still checks some sets in every process: torch 2.7's AMX set builds its test library
(cached) and loads it in a fresh `python -c "import torch; ..."`, 2-3 s of each warm job's first compilation on a
2-core CPU (torch 2.14 keeps a marker of each library that loaded, and skips the load). On a job whose proof holds,
`AskedAhead` asks torch's own list of the sets in a thread from Dynamo's import, beside the script's start; the first
compilation waits for that answer instead of asking itself.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as metadata
import logging
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

from ..files import read_json_object, write_json

log = logging.getLogger("opentc_launcher")

VARIABLE = "TORCHINDUCTOR_VEC_ISA_OK"
PROOF_FILE = "opentc-vec-isa.json"


def _cpu_flags() -> str:
    """The CPU's feature flags as the kernel lists them (the first processor's), or its architecture alone."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features", "features")):
                    return line.split(":", 1)[-1].strip()
    except OSError:
        pass
    return ""


def _compiler(env: Mapping[str, str]) -> str:
    """The C++ compiler Inductor runs (CXX, else g++), as a resolved path and its size: another compiler, or
    another version installed under the same name, is another machine."""
    name = env.get("CXX") or "g++"
    found = shutil.which(name, path=env.get("PATH"))
    if not found:
        return f"{name} (not found)"
    real = os.path.realpath(found)
    try:
        return f"{real} ({os.stat(real).st_size} bytes)"
    except OSError:
        return real


def machine_key(env: Mapping[str, str]) -> dict[str, str]:
    """What a proof holds for: this torch, this C++ compiler and this CPU (read without importing torch)."""
    flags = _cpu_flags()
    return {"torch": metadata.version("torch"), "compiler": _compiler(env),
            "cpu": f"{platform.machine()} " + hashlib.sha256(flags.encode()).hexdigest()[:16]}


PROVER_WAIT_SECONDS = 180.0   # torch's own check of one set is a few seconds; a prover past this is stuck
PROVER_MODULE = "opentc_launcher.inductor.vec_isa_prover"
MAX_PROOF_BYTES = 65536   # a proof is a few hundred bytes; a file past this is not one


def proven(folder: str, key: Mapping[str, str]) -> bool | None:
    """True when `folder` holds a proof for `key` that every set the CPU reports passed; False when the proof says
    one failed (the check must keep running); None when there is no proof for this machine, or the file is not one
    (unreadable, too large, nested too deep, without its true/false `proven`): the check then runs and proves anew,
    which writes a good proof over it. The file is in the job's cache folder, which comes back from S3: its shape is
    never trusted."""
    proof = read_json_object(os.path.join(folder, PROOF_FILE), MAX_PROOF_BYTES)
    if proof is None or proof.get("key") != dict(key) or not isinstance(proof.get("proven"), bool):
        return None
    return proof["proven"]


def _reported_sets(config: ModuleType, cpu_vec_isa: ModuleType) -> list:
    """What Inductor would use with the check skipped: every set the CPU reports, in torch's order. Some sets memoize
    their own answer (torch's AMX and AVX-512 VNNI sets: `__bool__` cached), which, asked with the check skipped,
    would then skip their part of the check for good; those answers are forgotten, so that the check asks anew."""
    before = config.cpp.vec_isa_ok
    config.cpp.vec_isa_ok = True
    try:
        sets = list(cpu_vec_isa.valid_vec_isa_list.__wrapped__())
    finally:
        config.cpp.vec_isa_ok = before
    for cls in {cls for isa in sets for cls in type(isa).__mro__}:
        forget = getattr(vars(cls).get("__bool__"), "cache_clear", None)
        if forget is not None:
            forget()
    return sets


def prove(folder: str, key: Mapping[str, str], at_once: bool = False) -> bool:
    """Run torch's own check, keep the proof in `folder`, and skip the check for the rest of this process when it
    holds. Returns whether it holds. `at_once`: each set's check (a build and a load, torch's `bool(isa)`) in a
    thread of its own instead of in turn; what passes is the same (valid_vec_isa_list keeps the sets whose check
    passes, in the reported order)."""
    from torch._inductor import config, cpu_vec_isa

    sets = _reported_sets(config, cpu_vec_isa)
    if at_once:
        with ThreadPoolExecutor(max(1, len(sets))) as pool:   # g++ and the load run in child processes
            passed = list(pool.map(bool, sets))
        checked = [str(isa) for isa, ok in zip(sets, passed, strict=True) if ok]
    else:
        checked = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]   # torch's check: each set in turn
    reported = [str(isa) for isa in sets]
    holds = bool(reported) and checked == reported
    try:
        write_json(os.path.join(folder, PROOF_FILE),
                   {"key": dict(key), "reported": reported, "passed": checked, "proven": holds}, indent=1)
    except OSError as e:
        log.warning("the vector-instruction check's proof could not be kept in %s (%s): the next job checks again",
                    folder, e)
    if holds:
        config.cpp.vec_isa_ok = True
    return holds


class Prover:
    """torch's check in a process of its own (PROVER_MODULE), started before the script, and its outcome when the
    worker's first compilation needs it."""

    def __init__(self, folder: str, env: Mapping[str, str], command: Sequence[str] | None = None):
        # The cache folder as its working directory: nothing the user wrote is on its import path.
        self.child: subprocess.Popen | None = subprocess.Popen(
            list(command or (sys.executable, "-m", PROVER_MODULE, folder)), env=dict(env), cwd=folder,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait(self, timeout: float = PROVER_WAIT_SECONDS) -> str | None:
        """None when it finished; otherwise why not (it is stopped then)."""
        if self.child is None:
            return "stopped"
        try:
            code = self.child.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            return f"it did not finish within {timeout:g} s"
        return None if code == 0 else f"it ended with exit code {code}"

    def stop(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()
        self.child = None


def wait_for_proof(folder: str, key: Mapping[str, str], timeout: float = PROVER_WAIT_SECONDS) -> bool | None:
    """In a worker beside the one whose prover runs: the proof once it is there, None when none came in time."""
    deadline = time.monotonic() + timeout
    while True:
        found = proven(folder, key)
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)



# What torch's list of the sets uses, imported before it is asked in a thread: an import in a thread while the
# script's own imports run could meet them in a cycle of module locks, which Python breaks by failing one of them.
ASKED_MODULES = ("torch._inductor.cpu_vec_isa", "torch._inductor.codecache", "torch._inductor.cpp_builder")
LATE_IMPORTS = ("torch.utils.cpp_extension", "torch.utils._filelock")   # imported inside the check's build


def _imported(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


class AskedAhead:
    """torch's list of the CPU's vector sets (`cpu_vec_isa.valid_vec_isa_list()`, memoized for the process), asked in
    a thread of this process so that its answer is there at the first compilation. Start it with `start()`."""

    def __init__(self, valid_vec_isa_list: Callable[[], Any]):
        self.seconds: float | None = None
        self.problem: str | None = None
        self._thread = threading.Thread(target=self._ask, args=(valid_vec_isa_list,), name="opentc-vector-sets",
                                        daemon=True)
        self._thread.start()

    @classmethod
    def start(cls) -> AskedAhead | str:
        """Asked now, in a thread; or why not (in words), when what it uses is not imported yet or the check is not
        skipped in this process."""
        missing = [name for name in ASKED_MODULES if not _imported(name)]
        if missing:
            return f"{', '.join(missing)} not imported yet"
        from torch._inductor import config, cpu_vec_isa

        if config.cpp.vec_isa_ok is not True:
            return f"the check is not skipped in this process (vec_isa_ok={config.cpp.vec_isa_ok})"
        for name in LATE_IMPORTS:
            importlib.import_module(name)
        return cls(cpu_vec_isa.valid_vec_isa_list)

    def _ask(self, valid_vec_isa_list: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            valid_vec_isa_list()
        except Exception as e:  # noqa: BLE001  (torch's internals: the first compilation asks again, as usual)
            self.problem = f"{type(e).__name__}: {e}"
        self.seconds = time.monotonic() - started

    def wait(self, timeout: float = PROVER_WAIT_SECONDS) -> str | None:
        """None when the answer is there; otherwise why not (the first compilation then asks torch itself)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return f"it did not finish within {timeout:g} s"
        return self.problem

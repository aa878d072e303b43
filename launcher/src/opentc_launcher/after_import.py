"""Run a function right after a module is first imported, whoever imports it.

The worker prepares things that live inside libraries (torch's optimizer hook, the compiler's callbacks, the
library patches) without importing those libraries itself before the script runs: a script that sets
CUDA_VISIBLE_DEVICES or OMP_NUM_THREADS before `import torch` must still get its way.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of each awaited module so that its callbacks run once its code has run."""

    def __init__(self) -> None:
        self.pending: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._lock = threading.Lock()
        self._finding: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.pending or fullname in self._finding:
            return None
        self._finding.add(fullname)
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        finally:
            self._finding.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            with self._lock:
                callbacks = self.pending.pop(fullname, [])
            for callback in callbacks:
                callback(module)

        # not a library's code: the loader this import made for itself
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_finder: _AfterImport | None = None


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """`callback(module)` now if `name` is imported already, else right after its first import."""
    global _finder
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    if _finder is None or _finder not in sys.meta_path:
        _finder = _AfterImport()
        sys.meta_path.insert(0, _finder)
    with _finder._lock:
        _finder.pending.setdefault(name, []).append(callback)

"""Run a callback once a module has been imported, without importing it.

torch_musa registers itself with modules that are costly to import (dynamo, Inductor)
or that may never be installed (Hugging Face's ``kernels``): ``when_imported`` runs the
callback at once if the module is loaded, else right after its import finishes, through
a meta-path finder that wraps that module's loader only. Standard library only.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from collections.abc import Callable
from types import ModuleType

__all__ = ["when_imported"]

_lock = threading.Lock()
# module name -> the (callback, what fails if it fails) still waiting for its import
_pending: dict[str, list[tuple[Callable[[ModuleType], None], str]]] = {}


def when_imported(name: str, callback: Callable[[ModuleType], None], *, failure: str) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is).

    A callback that raises never breaks the import: it becomes a warning naming
    ``name`` and ``failure`` (what will not work as a result).
    """
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _pending.setdefault(name, []).append((callback, failure))
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    _call(name, module, callback, failure)


def _call(name: str, module: ModuleType, callback: Callable, failure: str) -> None:
    try:
        callback(module)
    except Exception as e:  # noqa: BLE001  (never break the caller's import; say what is missing)
        warnings.warn(f"torch_musa: hooking into {name} failed ({type(e).__name__}: {e}); {failure}",
                      stacklevel=3)


def _run_pending(name: str, module: ModuleType) -> None:
    with _lock:
        callbacks = _pending.pop(name, [])
        if not _pending and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
    for callback, failure in callbacks:
        _call(name, module, callback, failure)


class _HookedLoader(importlib.abc.Loader):
    """Runs the module's own loader, then the callbacks; restores the loader after."""

    def __init__(self, loader, name: str):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if module.__spec__ is not None:
                module.__spec__.loader = self._loader
        _run_pending(self._name, module)

    def __getattr__(self, item):  # get_source, get_filename, ... as the real loader
        return getattr(self._loader, item)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder that only wraps the loader of modules with callbacks waiting."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HookedLoader(spec.loader, fullname)
        return spec


_finder = _PostImportFinder()

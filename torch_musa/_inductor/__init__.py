"""``torch.compile`` on musa: the default Inductor backend, through PyTorch's extension points.

What is registered, and where:

* a dynamo device interface for ``"musa"`` (``device_interface.MusaInterface``),
  registered when ``torch._dynamo.device_interface`` is imported;
* ``torch.musa.amp.autocast`` as one of dynamo's context managers
  (``dynamo_autocast``), registered when
  ``torch._dynamo.variables.torch`` is imported;
* Inductor's backend for the ``"musa"`` device (``backend.register``): under the
  host driver, Inductor's C++/OpenMP CPU scheduling with a wrapper that allocates
  on the right musa device and calls the kernels as it calls CPU kernels (a musa
  tensor's ``data_ptr()`` is host RAM there), plus device op overrides, a
  dtype check against the hardware profile, and AOTInductor's C++ wrapper;
  registered when ``torch._inductor.compile_fx`` is imported.

Importing ``torch._dynamo`` costs about 1.7 s and Inductor's code generators
another 0.5 s, so ``install()`` (run at ``import torch_musa``) imports neither:
it hooks the import of those modules and registers once they have loaded, so
``torch.compile``, ``torch._dynamo`` used directly and
``torch._inductor.aoti_compile_and_package`` all find musa registered.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from collections.abc import Callable

__all__ = ["install", "is_registered"]

_lock = threading.Lock()
_done: set[str] = set()


def _register_dynamo(_module=None) -> None:
    from torch_musa._inductor import device_interface

    device_interface.register()


def _register_dynamo_ctx(_module=None) -> None:
    from torch_musa._inductor import dynamo_autocast

    dynamo_autocast.register()


def _register_inductor(_module=None) -> None:
    from torch_musa._inductor import backend

    backend.register()


# The module whose import triggers each registration. Dynamo's interface module is
# small; compile_fx is what every Inductor compilation (torch.compile, AOTInductor,
# standalone_compile) imports before generating code, and once it has loaded the
# code generators the backend names can be imported without a cycle.
_HOOKS: dict[str, Callable] = {
    "torch._dynamo.device_interface": _register_dynamo,
    # dynamo's context-manager variables: torch.musa.amp.autocast traced as torch.cuda.amp's
    "torch._dynamo.variables.torch": _register_dynamo_ctx,
    "torch._inductor.compile_fx": _register_inductor,
}


def _run(name: str, module) -> None:
    with _lock:
        if name in _done:
            return
        _done.add(name)
    try:
        _HOOKS[name](module)
    except Exception as e:  # never break torch's own import; say what is missing
        warnings.warn(f"torch_musa: registering musa with {name} failed ({type(e).__name__}: {e}); "
                      "torch.compile's default backend will not work on musa", stacklevel=2)


class _HookedLoader(importlib.abc.Loader):
    """Runs the module's own loader, then the registration; restores the loader after."""

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
        _run(self._name, module)

    def __getattr__(self, item):  # get_source, get_filename, ... as the real loader
        return getattr(self._loader, item)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder that only wraps the loader of the hooked modules."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _HOOKS or fullname in _done:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HookedLoader(spec.loader, fullname)
        return spec


_finder = _PostImportFinder()


def install() -> None:
    """Register now for what is already imported; hook the import of the rest."""
    for name in _HOOKS:
        if name in sys.modules:
            _run(name, sys.modules[name])
    if any(name not in _done for name in _HOOKS) and _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def is_registered() -> dict[str, bool]:
    """Which registrations have run: ``{"dynamo": ..., "inductor": ...}``."""
    return {"dynamo": "torch._dynamo.device_interface" in _done,
            "inductor": "torch._inductor.compile_fx" in _done}

"""``torch.compile`` on musa: the default Inductor backend, through PyTorch's extension points.

What is registered, and where:

* a dynamo device interface for ``"musa"`` (``device_interface.MusaInterface``),
  registered when ``torch._dynamo.device_interface`` is imported;
* ``torch.musa.amp.autocast`` as one of dynamo's context managers
  (``dynamo_autocast``), registered when
  ``torch._dynamo.variables.torch`` is imported;
* the ``musagraphs`` dynamo backend (``musagraphs``), registered when
  ``torch._dynamo.backends.registry`` is imported;
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

from collections.abc import Callable

from torch_musa._post_import import when_imported

__all__ = ["install", "is_registered"]

_done: set[str] = set()


def _register_dynamo(_module=None) -> None:
    from torch_musa._inductor import device_interface

    device_interface.register()


def _register_dynamo_ctx(_module=None) -> None:
    from torch_musa._inductor import dynamo_autocast

    dynamo_autocast.register()


def _register_musagraphs(module) -> None:
    from torch_musa._inductor import musagraphs

    musagraphs.register(module)


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
    # torch.compile(backend="musagraphs")
    "torch._dynamo.backends.registry": _register_musagraphs,
}


def _registration(name: str) -> Callable:
    def run(module) -> None:
        if name not in _done:
            _done.add(name)
            _HOOKS[name](module)

    return run


def install() -> None:
    """Register now for what is already imported; hook the import of the rest."""
    for name in _HOOKS:
        if name not in _done:
            when_imported(name, _registration(name),
                          failure="torch.compile's default backend will not work on musa")


def is_registered() -> dict[str, bool]:
    """Which registrations have run: ``{"dynamo": ..., "inductor": ...}``."""
    return {"dynamo": "torch._dynamo.device_interface" in _done,
            "inductor": "torch._inductor.compile_fx" in _done}

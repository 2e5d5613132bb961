"""musa without a configuration: what ``import torch`` leaves when a TORCH_MUSA_* value is bad.

torch's backend autoload imports torch_musa inside ``import torch``, and turns any
exception into "Failed to load the backend extension", failing every ``import torch``
in that environment, CPU-only scripts included. CUDA reports a bad setting
(``PYTORCH_CUDA_ALLOC_CONF``) when CUDA is first used, not at ``import torch``, and a
broken driver makes ``torch.cuda.is_available()`` False with a warning. So under the
autoload a configuration error is a warning naming the variable, and musa is a
stand-in: ``torch.musa.is_available()`` is False, ``device_count()`` 0, and any other
use of ``torch.musa`` or of a musa tensor raises the configuration's error. An
explicit ``import torch_musa`` raises it at once.

Imports only torch and the standard library: the configuration failed to load.
"""
from __future__ import annotations

import sys
import types
import warnings

import torch

_error: BaseException | None = None
_library: torch.library.Library | None = None
_module: types.ModuleType | None = None


def error() -> BaseException | None:
    """The configuration error the stand-in reports; None when musa is not a stand-in."""
    return _error


def autoloading() -> bool:
    """Whether torch's backend autoload (inside ``import torch``) is importing torch_musa."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_import_device_backends" and frame.f_globals.get("__name__") == "torch":
            return True
        frame = frame.f_back
    return False


def _raise() -> None:
    raise type(_error)(*_error.args) if isinstance(_error, (ValueError, RuntimeError)) else RuntimeError(str(_error))


class _StandIn(types.ModuleType):
    """``torch.musa`` while the configuration is bad."""

    def __getattr__(self, name: str):
        if name.startswith("_"):  # probes (hasattr(torch.musa, "_utils")) see nothing
            raise AttributeError(name)
        _raise()


def _stand_in() -> types.ModuleType:
    m = _StandIn("torch.musa", "musa is unavailable: " + str(_error))
    m.is_available = lambda: False
    m.device_count = lambda: 0
    m.is_initialized = lambda: False
    m.is_bf16_supported = lambda *a, **k: False
    m.init = m._lazy_init = _raise
    return m


def install(err: BaseException) -> None:
    """Warn about ``err`` and make musa raise it when used."""
    global _error, _library, _module
    _error = err
    warnings.warn(f"torch_musa is not loaded, so the musa device is unavailable: {err}. Fix or unset "
                  "the variable; musa raises this error when it is used (TORCH_DEVICE_BACKEND_AUTOLOAD=0 "
                  "keeps torch from loading torch_musa)", RuntimeWarning, stacklevel=2)
    if _module is not None:
        return
    torch.utils.rename_privateuse1_backend("musa")  # "musa" devices parse, and reach the fallback

    def fallback(op, *args, **kwargs):
        _raise()

    _library = torch.library.Library("_", "IMPL")  # noqa: TOR901
    _library.fallback(fallback, "PrivateUse1")
    _module = _stand_in()
    torch._register_device_module("musa", _module)


def uninstall() -> None:
    """Remove the stand-in (the real device is about to register)."""
    global _error, _library, _module
    if _module is None:
        return
    if _library is not None:
        _library._destroy()
    if getattr(torch, "musa", None) is _module:
        delattr(torch, "musa")
        sys.modules.pop("torch.musa", None)
    _error = _library = _module = None

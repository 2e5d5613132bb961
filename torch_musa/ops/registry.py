"""Runtime side of the operator registry: Customized kernels, fallback policy,
double casting and op debug logging, configured from the environment at import.
"""
from __future__ import annotations

import functools
import importlib
import os

import torch

from torch_musa import _C

_FALLBACK_MODES = {"silent": 0, "warn": 1, "error": 2}
_TRUE = {"1", "on", "true", "yes"}
_libraries: list[torch.library.Library] = []


def _guarded(fn, device_guard: bool):
    """Run ``fn`` with its first musa tensor's device current (device_guard)."""
    if not device_guard:
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for a in args:
            if isinstance(a, torch.Tensor) and a.device.type == "musa":
                with torch.musa.device(a.device):
                    return fn(*args, **kwargs)
        return fn(*args, **kwargs)

    return wrapper


def register_customized() -> None:
    from torch_musa.ops import _generated, custom

    lib = torch.library.Library("musa", "DEF")
    _libraries.append(lib)
    for namespace, schema, target, device_guard in _generated.CUSTOMIZED:
        module, function = target.split(":")
        fn = getattr(importlib.import_module(module), function)
        name = schema.split("(")[0]
        lib.define(schema)
        lib.impl(name, _guarded(fn, device_guard), "PrivateUse1")
        lib.impl(name, fn, "CPU")
        qualified = f"{namespace}::{name}"
        if name in custom.FAKE:
            torch.library.register_fake(qualified, custom.FAKE[name], lib=lib)
        if name in custom.AUTOGRAD:
            backward, setup = custom.AUTOGRAD[name]
            torch.library.register_autograd(qualified, backward, setup_context=setup, lib=lib)


def configure_from_env() -> None:
    mode = os.environ.get("TORCH_MUSA_FALLBACK", "warn").strip().lower()
    if mode not in _FALLBACK_MODES:
        raise ValueError(f"TORCH_MUSA_FALLBACK={mode!r}: choose one of {', '.join(_FALLBACK_MODES)}")
    _C._set_fallback_mode(_FALLBACK_MODES[mode])
    set_double_cast(os.environ.get("TORCH_USE_MUSA_DOUBLE_CAST", "").strip().lower() in _TRUE)
    from torch_musa.ops import op_debug

    op_debug.configure_from_env()


def set_double_cast(enabled: bool) -> None:
    """Compute float64 in float32 on profiles without float64 (results stay float64)."""
    _C._set_double_cast(bool(enabled))


def set_fallback_mode(mode: str) -> None:
    _C._set_fallback_mode(_FALLBACK_MODES[mode])

"""Runtime side of the operator registry: Customized kernels, fallback policy,
double casting and op debug logging, set from the configuration at import.
"""
from __future__ import annotations

import functools
import importlib

import torch

from torch_musa import _C
from torch_musa.config import CONFIG
from torch_musa.ops import op_debug

_FALLBACK_MODES = {"silent": 0, "warn": 1, "error": 2}
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
        # Device-agnostic Python: the same function serves the kernel devices (CPU
        # here, CUDA where compiled musa graphs run as CUDA graphs).
        lib.impl(name, fn, "CPU")
        lib.impl(name, fn, "CUDA")
        qualified = f"{namespace}::{name}"
        if name in custom.FAKE:
            torch.library.register_fake(qualified, custom.FAKE[name], lib=lib)
        if name in custom.AUTOGRAD:
            backward, setup = custom.AUTOGRAD[name]
            torch.library.register_autograd(qualified, backward, setup_context=setup, lib=lib)


def configure() -> None:
    """TORCH_MUSA_FALLBACK, TORCH_USE_MUSA_DOUBLE_CAST and TORCH_MUSA_OP_DEBUG, as configured."""
    set_fallback_mode(CONFIG.fallback)
    set_double_cast(None)  # TORCH_USE_MUSA_DOUBLE_CAST, as configured at import
    op_debug.configure()


def set_double_cast(enabled: bool | None) -> None:
    """Compute float64 in float32 on profiles without float64 (results stay float64).

    ``None`` goes back to the configuration's ``TORCH_USE_MUSA_DOUBLE_CAST``, read
    once at import (``CONFIG.double_cast``, which Inductor follows too).
    """
    _C._set_double_cast(CONFIG.double_cast if enabled is None else bool(enabled))


def set_rnn_cpu_layers(enabled: bool) -> bool:
    """Let nn.LSTM/GRU on the host driver take the CPU device's whole-layer kernels where
    the CPU device does (inference; oneDNN's float32 LSTM in training): the CPU's bits,
    and faster. Off, every step runs the fused cells, as a MUSA card does (musa-doctor
    records that way). Returns the previous setting."""
    return _C._set_rnn_cpu_layers(bool(enabled))


def set_fallback_mode(mode: str) -> None:
    _C._set_fallback_mode(_FALLBACK_MODES[mode])

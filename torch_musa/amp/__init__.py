"""``torch.musa.amp``: automatic mixed precision on the musa device.

* :class:`autocast` — ``torch.autocast("musa")`` with float16 by default;
  bfloat16 only where the hardware profile supports it (else RuntimeError).
* :func:`custom_fwd` / :func:`custom_bwd` for custom autograd functions.
* :class:`GradScaler` — also reachable as ``torch.amp.GradScaler("musa")``.

The per-op casting policy (CUDA's lists, from ATen) is registered on the
``AutocastPrivateUse1`` dispatch key by :func:`register`
(:mod:`torch_musa.amp.autocast_kernels`).
"""
from __future__ import annotations

import functools
import sys

import torch

from torch_musa.amp import autocast_kernels, grad_scaler
from torch_musa.amp.autocast_kernels import registered_ops
from torch_musa.amp.grad_scaler import GradScaler
from torch_musa.core.runtime_api import amp_definitely_not_available  # torch.cuda.amp's (common.py)

__all__ = ["autocast", "custom_fwd", "custom_bwd", "GradScaler", "register", "registered_ops",
           "get_amp_supported_dtype", "is_autocast_available", "amp_definitely_not_available"]


class autocast(torch.amp.autocast):
    """``torch.musa.amp.autocast(args...)`` is ``torch.autocast("musa", args...)``.

    Unlike ``torch.autocast``, which only warns and disables itself, asking for
    a dtype the hardware profile lacks (bfloat16 on s80) raises RuntimeError.
    """

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True):
        if enabled:
            self._validate(dtype)
        super().__init__("musa", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    @staticmethod
    def _validate(dtype: torch.dtype) -> None:
        """RuntimeError for a dtype musa autocast cannot use (also run by dynamo's tracing)."""
        autocast_kernels._check_dtype(dtype)
        if dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise RuntimeError(
                f"musa autocast supports torch.float16, torch.bfloat16 and torch.float32, got {dtype}"
            )

    def __enter__(self):
        return super().__enter__()

    def __exit__(self, exc_type, exc_val, exc_tb):
        return super().__exit__(exc_type, exc_val, exc_tb)

    def __call__(self, func):
        return super().__call__(func)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """``torch.amp.custom_fwd(device_type="musa")``; same use as ``torch.cuda.amp.custom_fwd``."""
    if fwd is None:
        return functools.partial(custom_fwd, cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="musa", cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    """``torch.amp.custom_bwd(device_type="musa")``; same use as ``torch.cuda.amp.custom_bwd``."""
    if bwd is None:
        return custom_bwd
    return torch.amp.custom_bwd(bwd, device_type="musa")


def get_amp_supported_dtype():
    return torch.musa.get_amp_supported_dtype()


def is_autocast_available() -> bool:
    """Whether ``torch.autocast("musa")`` casts: torch supports autocast on the device
    and :func:`register` has installed musa's per-op kernels (until then, ops inside
    the region run uncast)."""
    return torch.amp.is_autocast_available("musa") and bool(registered_ops())


def register() -> None:
    """Install the autocast kernels and GradScaler rule; attach ``torch.musa.amp``.

    Idempotent; called from ``torch_musa/__init__.py``.
    """
    autocast_kernels.install()
    grad_scaler.install()
    module = sys.modules[__name__]
    device_module = getattr(torch, "musa", None)
    if device_module is not None:
        setattr(device_module, "amp", module)
        sys.modules.setdefault(device_module.__name__ + ".amp", module)
    sys.modules["torch.musa.amp"] = module

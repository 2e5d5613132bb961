"""GradScaler for musa.

``torch.amp.GradScaler`` carries out ``1 / scale`` in float64, which a
hardware profile without float64 (s80) refuses. On musa the reciprocal
runs in float64 only where the profile has it, else in float32
(torch_musa.core.grad_scaling). ``install()`` applies the same rule to
``torch.amp.GradScaler("musa")``. The class itself lives at the real
torch_musa's path, ``torch_musa.core.amp.grad_scaler``.
"""
from __future__ import annotations

import torch
from torch.amp.grad_scaler import GradScaler as _TorchGradScaler

from torch_musa.core.amp.grad_scaler import GradScaler, OptState, _musa_unscale_

__all__ = ["GradScaler", "OptState", "install"]

_original_unscale = _TorchGradScaler.unscale_


def _unscale_(self, optimizer) -> None:
    scale = getattr(self, "_scale", None)
    if scale is not None and scale.device.type == torch._C._get_privateuse1_backend_name():
        return _musa_unscale_(self, optimizer)
    return _original_unscale(self, optimizer)


_unscale_.__doc__ = _original_unscale.__doc__


def install() -> None:
    """Route ``torch.amp.GradScaler("musa").unscale_`` through the musa rule."""
    if _TorchGradScaler.unscale_ is not _unscale_:
        _TorchGradScaler.unscale_ = _unscale_

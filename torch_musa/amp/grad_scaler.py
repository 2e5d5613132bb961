"""GradScaler for musa.

``torch.amp.GradScaler`` carries out ``1 / scale`` in float64, which a
hardware profile without float64 (s80) refuses. On musa the reciprocal
runs in float64 only where the profile has it, else in float32 (as PyTorch does
on MPS; the scale is a power of two in normal use, so the result is exact).
``install()`` applies the same rule to ``torch.amp.GradScaler("musa")``.
"""
from __future__ import annotations

import torch
from torch.amp.grad_scaler import GradScaler as _TorchGradScaler
from torch.amp.grad_scaler import OptState

from torch_musa.config import CONFIG

_original_unscale = _TorchGradScaler.unscale_


def _musa_unscale_(self, optimizer) -> None:
    if not self._enabled:
        return
    self._check_scale_growth_tracker("unscale_")
    optimizer_state = self._per_optimizer_states[id(optimizer)]
    if optimizer_state["stage"] is OptState.UNSCALED:
        raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
    elif optimizer_state["stage"] is OptState.STEPPED:
        raise RuntimeError("unscale_() is being called after step().")
    if self._scale is None:
        raise AssertionError("_scale is None in unscale_")
    if CONFIG.profile.supports_fp64:
        inv_scale = self._scale.double().reciprocal().float()
    else:
        inv_scale = self._scale.reciprocal()
    found_inf = torch.full((), 0.0, dtype=torch.float32, device=self._scale.device)
    optimizer_state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
    optimizer_state["stage"] = OptState.UNSCALED


def _unscale_(self, optimizer) -> None:
    scale = getattr(self, "_scale", None)
    if scale is not None and scale.device.type == torch._C._get_privateuse1_backend_name():
        return _musa_unscale_(self, optimizer)
    return _original_unscale(self, optimizer)


_unscale_.__doc__ = _original_unscale.__doc__


class GradScaler(_TorchGradScaler):
    """``torch.musa.amp.GradScaler``: ``torch.amp.GradScaler`` on the musa device.

    Same arguments as ``torch.cuda.amp.GradScaler``.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            "musa",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )

    unscale_ = _musa_unscale_


def install() -> None:
    """Route ``torch.amp.GradScaler("musa").unscale_`` through the musa rule."""
    if _TorchGradScaler.unscale_ is not _unscale_:
        _TorchGradScaler.unscale_ = _unscale_

"""GradScaler for musa (``torch.musa.amp.GradScaler``), at the real torch_musa's path.

``torch.amp.GradScaler`` carries out ``1 / scale`` in float64, which a
hardware profile without float64 (s80) refuses. On musa the reciprocal
runs in float64 only where the profile has it, else in float32
(torch_musa.core.grad_scaling). ``torch_musa.amp.grad_scaler.install()`` applies
the same rule to ``torch.amp.GradScaler("musa")``. ``OptState`` is
``torch.amp.grad_scaler.OptState``.
"""
from __future__ import annotations

from torch.amp.grad_scaler import GradScaler as _TorchGradScaler
from torch.amp.grad_scaler import OptState

from torch_musa.core.grad_scaling import unscale_grads

__all__ = ["GradScaler", "OptState"]


def _musa_unscale_(self, optimizer) -> None:
    if self._enabled:
        unscale_grads(self, optimizer, allow_fp16=False, found_inf_shape=())


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

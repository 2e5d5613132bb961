"""The unscale step musa's gradient scalers share (torch_musa.amp's GradScaler and
torch_musa.distributed.fsdp's ShardedGradScaler).

``torch.amp.GradScaler`` computes ``1 / scale`` in float64, which a hardware profile
without float64 (s80) refuses. Here the reciprocal runs in float64 only where the
profile has it, else in float32 (as PyTorch does on MPS; the scale is a power of two in
normal use, so the result is exact).
"""
from __future__ import annotations

from typing import Any

import torch
from torch.amp.grad_scaler import OptState

from torch_musa.config import CONFIG

__all__ = ["inverse_scale", "unscale_grads"]


def inverse_scale(scale: torch.Tensor) -> torch.Tensor:
    """``1 / scale`` as float32, through float64 where the profile has it."""
    if CONFIG.profile.supports_fp64:
        return scale.double().reciprocal().float()
    return scale.reciprocal()


def unscale_grads(scaler: Any, optimizer: torch.optim.Optimizer, *, allow_fp16: bool,
                  found_inf_shape: tuple[int, ...]) -> dict[str, Any]:
    """GradScaler.unscale_'s body for a musa scale: the stage checks, the grads divided by
    the scale, the stage set to UNSCALED. Returns the optimizer's state (its
    ``found_inf_per_device`` holds one flag tensor per device)."""
    scaler._check_scale_growth_tracker("unscale_")
    state = scaler._per_optimizer_states[id(optimizer)]
    if state["stage"] is OptState.UNSCALED:
        raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
    if state["stage"] is OptState.STEPPED:
        raise RuntimeError("unscale_() is being called after step().")
    if scaler._scale is None:
        raise AssertionError("_scale is None in unscale_")
    found_inf = torch.full(found_inf_shape, 0.0, dtype=torch.float32, device=scaler._scale.device)
    state["found_inf_per_device"] = scaler._unscale_grads_(
        optimizer, inverse_scale(scaler._scale), found_inf, allow_fp16)
    state["stage"] = OptState.UNSCALED
    return state

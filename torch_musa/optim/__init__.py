"""``torch_musa.optim``: fused optimizers for musa parameters.

:class:`FusedAdam` and :class:`FusedAdamW` keep torch_musa's signatures and
behave as ``torch.optim.Adam(..., fused=True)`` / ``torch.optim.AdamW(...,
fused=True)`` on musa: one multi-tensor ``_fused_adam_`` / ``_fused_adamw_``
call per parameter group and dtype, GradScaler-aware (the scaler hands them
``grad_scale`` and ``found_inf`` instead of unscaling the gradients itself).

``torch.optim.Adam/AdamW/SGD(..., fused=True)`` and ``foreach=True`` already
accept musa parameters (PyTorch lists the PrivateUse1 device among the fused
and foreach devices); nothing needs registering.
"""
from __future__ import annotations

import torch

__all__ = ["FusedAdam", "FusedAdamW"]


def _check_params(name, optimizer):
    supported = (torch._C._get_privateuse1_backend_name(), "cpu")
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.device.type not in supported or not torch.is_floating_point(p):
                raise RuntimeError(
                    f"{name} requires all the params to be floating point Tensors of supported "
                    f"devices: {list(supported)}; got {p.dtype} on {p.device}")


class FusedAdam(torch.optim.Adam):
    """Adam with the fused multi-tensor kernel (``torch.optim.Adam(fused=True)``).

    Args: params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0 (L2,
    added to the gradient), amsgrad=False, and keyword-only maximize,
    capturable, differentiable (must stay False: fused kernels are not
    differentiable).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, maximize=False, capturable=False, differentiable=False):
        if differentiable:
            raise RuntimeError("FusedAdam does not support differentiable=True")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, foreach=False, maximize=maximize, capturable=capturable,
                         differentiable=False, fused=True)
        _check_params(type(self).__name__, self)


class FusedAdamW(torch.optim.AdamW):
    """AdamW with the fused multi-tensor kernel (``torch.optim.AdamW(fused=True)``).

    Args: params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2
    (decoupled), amsgrad=False, and keyword-only maximize, capturable,
    differentiable (must stay False).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, capturable=False, differentiable=False):
        if differentiable:
            raise RuntimeError("FusedAdamW does not support differentiable=True")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, foreach=False, maximize=maximize, capturable=capturable,
                         differentiable=False, fused=True)
        _check_params(type(self).__name__, self)

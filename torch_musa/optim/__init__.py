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

__all__ = ["FusedLAMB", "FusedAdam", "FusedAdamW"]


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


class FusedLAMB(torch.optim.Optimizer):
    """LAMB (You et al., "Large Batch Optimization for Deep Learning") with torch_musa's
    signature, as apex's fused kernel computes it:

    * the global gradient norm over every parameter scales the gradients down to
      ``max_grad_norm`` (when it exceeds it);
    * Adam moments (``grad_averaging`` puts ``1 - beta1`` on the gradient) with bias
      correction; weight decay is decoupled (``adam_w_mode=True``, added to the update)
      or L2 (added to the scaled gradient);
    * the trust ratio ``||p|| / ||update||`` per tensor scales the step of parameters
      with weight decay (all of them with ``use_nvlamb``).

    The step is ``group["step"]`` (one count per group). float16 and float32
    parameters; the arithmetic is float32 (float16 parameters keep float32 math, as
    the fused kernel's), with one ``torch._foreach_*`` call per stage and group. Unlike
    apex, gradients are left as they were (the update is not written into them).
    """

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6,
                 weight_decay=0.01, amsgrad=False, adam_w_mode=True, grad_averaging=True,
                 set_grad_none=True, max_grad_norm=1.0, use_nvlamb=False):
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameters: {betas} (each in [0, 1))")
        defaults = {"lr": lr, "bias_correction": bias_correction, "betas": betas, "eps": eps,
                    "weight_decay": weight_decay, "grad_averaging": grad_averaging,
                    "max_grad_norm": max_grad_norm}
        super().__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.use_nvlamb = use_nvlamb

    def zero_grad(self, set_to_none: bool = True):
        if self.set_grad_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            super().zero_grad(set_to_none=False)

    @torch.no_grad()
    def step(self, closure=None):
        """One LAMB step over every group; ``closure`` re-evaluates the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedLAMB does not support sparse gradients, "
                                       "please consider SparseAdam instead")
                if p.dtype not in (torch.float16, torch.float32):
                    raise RuntimeError(f"FusedLAMB only support fp16 and fp32 (got {p.dtype})")
                grads.append(p.grad)
        if not grads:
            return loss
        device = grads[0].device
        norms = torch._foreach_norm([g.float() for g in grads])
        global_norm = torch.linalg.vector_norm(torch.stack(norms).to(device))
        max_norm = self.defaults["max_grad_norm"]
        # The clip divisor: the global norm over max_grad_norm when it exceeds it, else 1.
        clip = torch.where(global_norm > max_norm, global_norm / max_norm,
                           torch.ones_like(global_norm))

        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            beta1, beta2 = group["betas"]
            beta3 = 1 - beta1 if group["grad_averaging"] else 1.0
            group["step"] = group.get("step", 0) + 1
            step = group["step"]
            bc1 = 1 - beta1 ** step if group["bias_correction"] else 1.0
            bc2 = 1 - beta2 ** step if group["bias_correction"] else 1.0
            decay = group["weight_decay"]
            for p in params:
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
            p32 = [p.float() for p in params]
            g = torch._foreach_div([p.grad.float() for p in params], clip)
            m = [self.state[p]["exp_avg"].float() for p in params]
            v = [self.state[p]["exp_avg_sq"].float() for p in params]
            if not self.adam_w_mode and decay != 0:
                torch._foreach_add_(g, p32, alpha=decay)
            torch._foreach_mul_(m, beta1)
            torch._foreach_add_(m, g, alpha=beta3)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, g, g, value=1 - beta2)
            denom = torch._foreach_sqrt(torch._foreach_div(v, bc2))
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(torch._foreach_div(m, bc1), denom)
            if self.adam_w_mode and decay != 0:
                torch._foreach_add_(update, p32, alpha=decay)
            lr = group["lr"]
            if self.use_nvlamb or decay != 0:
                p_norms = torch._foreach_norm(p32)
                u_norms = torch._foreach_norm(update)
                ratios = [torch.where((pn != 0) & (un != 0), lr * pn / un, torch.full_like(pn, lr))
                          for pn, un in zip(p_norms, u_norms)]
                torch._foreach_mul_(update, ratios)
            else:
                torch._foreach_mul_(update, lr)
            torch._foreach_sub_(p32, update)
            for p, new, m_new, v_new in zip(params, p32, m, v):
                if new is not p:
                    p.copy_(new)
                st = self.state[p]
                if m_new is not st["exp_avg"]:
                    st["exp_avg"].copy_(m_new)
                    st["exp_avg_sq"].copy_(v_new)
        return loss

"""Customized kernels: operators the device supplies itself (namespace musa).

Each has a kernel (musa and CPU), a fake kernel so it works under FakeTensor
and torch.compile, and an autograd formula. Declared in musa_functions.yaml.
"""
from __future__ import annotations

import torch


def _dims(normalized_shape) -> list[int]:
    return list(range(-len(normalized_shape), 0))


def rms_norm(input: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None = None,
             eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(mean(x², normalized dims) + eps) * weight, accumulated in float32."""
    x = input.float()
    y = x * torch.rsqrt(x.pow(2).mean(_dims(normalized_shape), keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(input.dtype)


def _rms_norm_fake(input, normalized_shape, weight=None, eps=1e-6):
    return torch.empty_like(input)


def _rms_norm_setup(ctx, inputs, output):
    input, normalized_shape, weight, eps = inputs
    ctx.save_for_backward(input, weight)
    ctx.normalized_shape, ctx.eps = normalized_shape, eps


def _rms_norm_backward(ctx, grad):
    input, weight = ctx.saved_tensors
    dims = _dims(ctx.normalized_shape)
    x, g = input.float(), grad.float()
    r = torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + ctx.eps)
    xhat = x * r
    gw = g * weight.float() if weight is not None else g
    grad_input = r * (gw - xhat * (gw * xhat).mean(dims, keepdim=True))
    grad_weight = None
    if weight is not None and ctx.needs_input_grad[2]:
        lead = list(range(input.dim() - len(ctx.normalized_shape)))
        grad_weight = (g * xhat).sum(lead).to(weight.dtype) if lead else (g * xhat).to(weight.dtype)
    return grad_input.to(input.dtype), None, grad_weight, None


def fused_bias_gelu(input: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """gelu(input + bias) in one op (one pass over memory on a real device)."""
    return torch.nn.functional.gelu(input + bias, approximate=approximate)


def _fused_bias_gelu_fake(input, bias, approximate="none"):
    return torch.empty_like(input)


def _fused_bias_gelu_setup(ctx, inputs, output):
    input, bias, approximate = inputs
    ctx.save_for_backward(input, bias)
    ctx.approximate = approximate


def _fused_bias_gelu_backward(ctx, grad):
    input, bias = ctx.saved_tensors
    g = torch.ops.aten.gelu_backward(grad, input + bias, approximate=ctx.approximate)
    lead = list(range(g.dim() - bias.dim()))
    return g, (g.sum(lead) if lead else g), None


FAKE = {"rms_norm": _rms_norm_fake, "fused_bias_gelu": _fused_bias_gelu_fake}
AUTOGRAD = {
    "rms_norm": (_rms_norm_backward, _rms_norm_setup),
    "fused_bias_gelu": (_fused_bias_gelu_backward, _fused_bias_gelu_setup),
}

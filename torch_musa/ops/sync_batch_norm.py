"""musa kernels for SyncBatchNorm's CUDA-only ops, so ``nn.SyncBatchNorm`` runs on musa.

PyTorch ships ``batch_norm_stats``, ``batch_norm_gather_stats_with_counts``,
``batch_norm_elemt``, ``batch_norm_backward_reduce`` and ``batch_norm_backward_elemt``
for CUDA alone; on the host driver they reached the CPU fallback, which has no kernel.
SyncBatchNorm's own code (torch/nn/modules/_functions.py) does the collectives over the
process group (mccl); these are the per-device parts, written with musa ops. As CUDA's
kernels, they accumulate in float32 for float16/bfloat16 inputs and return statistics
(mean, invstd, the sums) in that accumulate type.
"""
from __future__ import annotations

import torch


def _acc(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _dims(t: torch.Tensor) -> list[int]:
    """Every dimension but the channels' (dim 1)."""
    return [0] + list(range(2, t.dim()))


def _per_channel(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A [C] tensor shaped to broadcast over ``like`` (N, C, ...)."""
    return v.reshape([1, -1] + [1] * (like.dim() - 2))


def _check(op: str, input: torch.Tensor) -> None:
    if input.dim() < 2:
        raise RuntimeError(f"{op}: input must have at least 2 dimensions (N, C, ...), got {input.dim()}")


def batch_norm_stats(input, eps):
    """Per-channel mean and 1/sqrt(biased variance + eps) of ``input``."""
    _check("batch_norm_stats", input)
    x = _acc(input)
    var, mean = torch.var_mean(x, _dims(x), correction=0)
    return mean, torch.rsqrt(var + eps)


def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps,
                                        counts):
    """Combine the ranks' [world, C] means and invstds, weighted by their element counts;
    updates the running statistics (unbiased variance) in place as CUDA's does."""
    counts = counts.to(mean.dtype).reshape(-1, 1)
    total = counts.sum(0)
    g_mean = (counts * mean).sum(0) / total
    var = invstd.pow(-2) - eps
    g_var = (counts * (var + (mean - g_mean).pow(2))).sum(0) / total
    if running_mean is not None:
        running_mean.copy_((1 - momentum) * running_mean + momentum * g_mean.to(running_mean.dtype))
    if running_var is not None:
        unbiased = g_var * total / (total - 1).clamp_min(1)
        running_var.copy_((1 - momentum) * running_var + momentum * unbiased.to(running_var.dtype))
    return g_mean, torch.rsqrt(g_var + eps)


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    """(input - mean) * invstd * weight + bias, in float32 for half inputs."""
    _check("batch_norm_elemt", input)
    x = _acc(input)
    y = (x - _per_channel(mean, x)) * _per_channel(invstd, x)
    if weight is not None:
        y = y * _per_channel(_acc(weight), x)
    if bias is not None:
        y = y + _per_channel(_acc(bias), x)
    return y.to(input.dtype)


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    """Per-channel sum(dy), sum(dy * (x - mean)), and the weight and bias gradients."""
    _check("batch_norm_backward_reduce", input)
    dy, x = _acc(grad_out), _acc(input)
    dims = _dims(x)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (x - _per_channel(mean, x))).sum(dims)
    wdtype = weight.dtype if weight is not None else mean.dtype
    grad_weight = (sum_dy_xmu * invstd).to(wdtype)
    grad_bias = sum_dy.to(wdtype)
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    """The input gradient from the ranks' reduced sums (``count``: each rank's elements)."""
    _check("batch_norm_backward_elemt", input)
    dy, x = _acc(grad_out), _acc(input)
    n = count.sum().to(sum_dy.dtype)  # counts are integers (or whole floats)
    mean_dy, mean_dy_xmu = sum_dy / n, sum_dy_xmu / n
    k = _per_channel(invstd, x)
    g = dy - _per_channel(mean_dy, x) - (x - _per_channel(mean, x)) * k * k * _per_channel(mean_dy_xmu, x)
    scale = k if weight is None else k * _per_channel(_acc(weight), x)
    return (g * scale).to(input.dtype)


_KERNELS = {
    "batch_norm_stats": batch_norm_stats,
    "batch_norm_gather_stats_with_counts": batch_norm_gather_stats_with_counts,
    "batch_norm_elemt": batch_norm_elemt,
    "batch_norm_backward_reduce": batch_norm_backward_reduce,
    "batch_norm_backward_elemt": batch_norm_backward_elemt,
}


def kernel(op: str):
    """The kernel of ``op`` (musa_functions.yaml names this factory; ops/kernels.py registers it)."""
    return _KERNELS[op]

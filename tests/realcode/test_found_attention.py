"""Attention cases found by running Hugging Face models built from tiny configs
(T5, LLaMA/Mistral with grouped-query attention) on musa against the CPU:
each is the minimal form of what failed or differed.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ._common import assert_same


def _sdpa_and_grads(device, dtype=torch.float32, kv_heads=4, mask_grad=False, mask=True):
    """scaled_dot_product_attention forward + backward; (out, grads) on the CPU."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 7, 8, generator=g, dtype=dtype)
    k = torch.randn(2, kv_heads, 9, 8, generator=g, dtype=dtype)
    v = torch.randn(2, kv_heads, 9, 8, generator=g, dtype=dtype)
    bias = torch.randn(1, 4, 7, 9, generator=g, dtype=dtype)
    leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
    attn_mask = None
    if mask:
        attn_mask = bias.to(device).requires_grad_(mask_grad)
        if mask_grad:
            leaves.append(attn_mask)
    out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=attn_mask,
                                         enable_gqa=kv_heads != 4)
    out.pow(2).sum().backward()
    return out.detach().cpu(), [t.grad.cpu() for t in leaves]


def test_sdpa_with_a_learned_bias_mask_trains():
    """T5's relative position bias is a parameter passed as the attn_mask: the CPU
    takes the math path (its flash kernel has no mask gradient); musa called the CPU
    flash kernel and raised 'not differentiable with respect to argument attn_mask'."""
    cpu_out, cpu_grads = _sdpa_and_grads("cpu", mask_grad=True)
    out, grads = _sdpa_and_grads("musa", mask_grad=True)
    assert_same(out, cpu_out, "attention output")
    for name, got, want in zip(("q", "k", "v", "bias"), grads, cpu_grads):
        assert_same(got, want, f"gradient of {name}")


@pytest.mark.parametrize("dtype,kv_heads,mask", [
    pytest.param(torch.float32, 2, False, id="float32-gqa"),
    pytest.param(torch.float32, 2, True, id="float32-gqa-mask"),
    pytest.param(torch.float64, 4, True, id="float64-mask"),
    pytest.param(torch.float64, 2, False, id="float64-gqa"),
])
def test_sdpa_takes_the_cpu_kernel_where_the_cpu_does(dtype, kv_heads, mask):
    """LLaMA/Mistral grouped-query attention (enable_gqa) and float64 attention:
    the CPU device runs its fused flash kernel, musa ran the op-by-op math path, so
    the two differed in the last bits (and more after a few training steps)."""
    cpu_out, cpu_grads = _sdpa_and_grads("cpu", dtype, kv_heads, mask=mask)
    out, grads = _sdpa_and_grads("musa", dtype, kv_heads, mask=mask)
    assert_same(out, cpu_out, "attention output", dtype=dtype)
    for name, got, want in zip(("q", "k", "v"), grads, cpu_grads):
        assert_same(got, want, f"gradient of {name}", dtype=dtype)

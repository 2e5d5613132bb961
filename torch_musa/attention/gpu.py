"""SDPA under the cuda driver: PyTorch's GPU kernels, chosen as on cuda.

PyTorch's composite ``scaled_dot_product_attention`` asks the device for a
backend and then takes the flash path only for tensors whose device *type* is
CUDA; a musa tensor would be sent to the CPU flash kernel. This kernel makes the
same choice (``_fused_sdp_choice``, which the fallback answers on the GPU
aliases) and calls the GPU path of the chosen backend, each of which has its own
autograd formula, so forward and backward run the flash, memory-efficient or
cuDNN kernels.
"""
from __future__ import annotations

import torch

# sdp::SDPBackend, as _fused_sdp_choice returns it.
MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3

_libs: list = []


def _needs_grad(*ts) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    aten = torch.ops.aten
    choice = aten._fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal,
                                    scale=scale, enable_gqa=enable_gqa)
    heads_aligned = all(t.size(-1) % 8 == 0 for t in (query, key, value))
    if choice == FLASH and heads_aligned and attn_mask is None:
        return aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    if choice == EFFICIENT and attn_mask is None:
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, None, _needs_grad(query, key, value), dropout_p, is_causal,
            scale=scale)[0]
    if choice == CUDNN and attn_mask is None:
        return aten._scaled_dot_product_cudnn_attention(
            query, key, value, None, _needs_grad(query, key, value), dropout_p, is_causal,
            False, scale=scale)[0]
    return aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
        enable_gqa=enable_gqa)[0]


def register() -> None:
    """Install the kernel (idempotent); called under TORCH_MUSA_DRIVER=cuda."""
    if _libs:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")
    lib.impl("scaled_dot_product_attention", _sdpa, "PrivateUse1")
    _libs.append(lib)

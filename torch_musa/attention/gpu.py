"""SDPA under the cuda driver: PyTorch's GPU kernels, chosen as on cuda.

PyTorch's composite ``scaled_dot_product_attention`` asks the device for a
backend and then takes the flash path only for tensors whose device *type* is
CUDA; a musa tensor would be sent to the CPU flash kernel. This kernel makes the
same choice (``_fused_sdp_choice``, which the fallback answers on the GPU
aliases) and calls the GPU path of the chosen backend, each of which has its own
autograd formula, so forward and backward run the flash, memory-efficient or
cuDNN kernels.

While ``torch.compile`` (or export) traces, the inputs are fake tensors and the
choice is asked of real kernel-device stand-ins instead (:func:`sdp_choice`),
so compiled code takes the same kernel as eager.

Eager calls run the same steps in C++ (``csrc/python/gpu_attention.cpp``, which
:func:`register` installs): this Python entry serves the traced calls and a mask
that requires grad, which the C++ kernel hands back.
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils._python_dispatch import _disable_current_modes

from torch_musa.attention.cpu_rule import layout_stand_in

# sdp::SDPBackend, as _fused_sdp_choice returns it.
MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3

#: The device whose kernels run musa's ops under this driver.
KERNEL_DEVICE = "cuda"


def _needs_grad(*ts) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def _float_mask(mask, dtype, cudnn=False):
    # A boolean mask becomes an additive one, as PyTorch's composite makes it after the
    # choice, for every kernel the math path included (whose add_ would add a bool mask's
    # 0/1): -inf where masked, -65504 for cuDNN (convert_boolean_attn_mask_cudnn).
    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask.logical_not(), -65504.0 if cudnn else float("-inf"), zero)


def _efficient_bias(mask, query, key):
    # The memory-efficient kernel wants a 16-aligned bias: pad, slice back, expand.
    aligned = mask.stride(-1) == 1 and all(s % 16 == 0 for s in mask.stride()[:-1])
    if not aligned:
        n = mask.size(-1)
        mask = torch.nn.functional.pad(mask, (0, 16 - n % 16))[..., :n]
    return mask.expand(query.size(0), query.size(1), query.size(2), key.size(2))


def _stand_in(t):
    """A real tensor of the kernel device with ``t``'s sizes, strides, dtype and
    requires_grad, for asking the kernel device's own rule (values never read)."""
    if t is None:
        return None
    index = t.device.index if t.device.index is not None else 0
    return layout_stand_in(t, torch.device(KERNEL_DEVICE, index),
                           requires_grad=t.requires_grad and t.is_floating_point())


def sdp_choice(query, key, value, mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False) -> int:
    """The GPU's ``_fused_sdp_choice`` for these musa inputs, eager or traced.

    Eager, the fallback answers on CUDA aliases of the inputs. While tracing they are
    fake, and no fake tensor gets the GPU's answer: the meta kernel answers MATH for
    musa tensors, and for fake CUDA tensors too (measured on the H200 with PyTorch 2.11:
    eager CUDA 3 = cuDNN, fake CUDA 0), so compiled code ran every attention through the
    math path, which computes bfloat16/float16 attention in float32. The rule is asked of
    real kernel-device stand-ins of the same sizes, strides and dtypes instead, with the
    tracing modes set aside so that the question leaves no node in the graph.
    """
    aten = torch.ops.aten
    # The fallback's CUDA aliases carry no autograd: a mask that requires grad, which
    # CUDA's rule keeps from cuDNN, is asked through stand-ins that require it too.
    if not is_fake(query) and not (mask is not None and mask.requires_grad):
        return aten._fused_sdp_choice(query, key, value, mask, dropout_p, is_causal,
                                      scale=scale, enable_gqa=enable_gqa)
    with _disable_current_modes():
        q, k, v, m = (_stand_in(t) for t in (query, key, value, mask))
        return aten._fused_sdp_choice(q, k, v, m, dropout_p, is_causal, scale=scale,
                                      enable_gqa=enable_gqa)


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    aten = torch.ops.aten
    # PyTorch's composite asks its rule with the mask as given, then converts it.
    choice = sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    mask = _float_mask(attn_mask, query.dtype, cudnn=choice == CUDNN)
    grad = _needs_grad(query, key, value)
    if choice == FLASH:
        head = query.size(-1)
        pad = (8 - head % 8) % 8
        q, k, v = ((torch.nn.functional.pad(t, (0, pad)) if pad else t) for t in (query, key, value))
        out = aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, is_causal, False,
            scale=scale if scale is not None else head ** -0.5)[0]
        return out[..., :head] if pad else out
    if choice == EFFICIENT:
        bias = None if mask is None else _efficient_bias(mask, query, key)
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, grad, dropout_p, is_causal, scale=scale)[0]
    if choice == CUDNN:
        return aten._scaled_dot_product_cudnn_attention(
            query, key, value, mask, grad, dropout_p, is_causal, False, scale=scale)[0]
    return aten._scaled_dot_product_attention_math(
        query, key, value, mask, dropout_p, is_causal, None, scale=scale,
        enable_gqa=enable_gqa)[0]


def register() -> None:
    """Install the kernel (idempotent); called under TORCH_MUSA_DRIVER=cuda.

    The kernel is C++ (``csrc/python/gpu_attention.cpp``: the same steps as
    :func:`_sdpa`, without a Python call per attention); it hands traced inputs, and
    a mask that requires grad, to :func:`_sdpa`."""
    from torch_musa import _C

    _C._register_gpu_sdpa(_sdpa)

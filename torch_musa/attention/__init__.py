"""Scaled-dot-product attention on musa: a math path and a tiled flash path.

``register()`` installs, for musa tensors:

* ``aten::_fused_sdp_choice`` (PrivateUse1): picks the backend from the
  ``torch.nn.attention.sdpa_kernel`` flags and the flash constraints
  (:func:`flash_constraint_failures`); returns ``SDPBackend.OVERRIDEABLE``
  for flash, ``SDPBackend.MATH`` otherwise, and raises a RuntimeError naming
  the failed constraints when flash is the only enabled backend.
* ``aten::_scaled_dot_product_fused_attention_overrideable`` and its
  ``_backward`` (PrivateUse1): the flash kernels of
  :mod:`torch_musa.attention.flash`; autograd connects them through
  PyTorch's own derivative formula.
* ``aten::scaled_dot_product_attention`` (AutogradPrivateUse1 and
  PrivateUse1): PyTorch 2.13 consults ``_fused_sdp_choice`` only through a
  C++ DispatchStub that an out-of-tree Python backend cannot fill, so this
  kernel does what PyTorch's composite does for an out-of-tree device: apply
  the ``_fused_sdp_choice`` rule, then call the overrideable op (bool masks converted
  to additive ones) or ``_scaled_dot_product_attention_math``.

Flash constraints: 4-D (batch, heads, seq, head_dim) inputs, float16 or
bfloat16 (bfloat16 only where the profile has it), one dtype for q/k/v,
equal head dims that are a multiple of 8 and at most 128 (160 on MUSA arch
3.x), equal batch sizes, key/value heads equal to query heads (or dividing
them with ``enable_gqa=True``), masks bool or of the query dtype; and on top,
whatever PyTorch's own rule for the CPU device refuses for its flash kernel
(:mod:`torch_musa.attention.cpu_rule`, asked of CPU stand-ins: a 3-D mask, a
non-unit last-dim stride, ...), except dropout and a mask that requires grad,
which musa's kernel has and the CPU's has not.

float32/float64 on the math backend take the CPU's fused kernel
(``_scaled_dot_product_flash_attention_for_cpu``) exactly where the CPU device's
``_fused_sdp_choice`` answers FLASH for CPU stand-ins of the inputs, so musa gives
the CPU's bits; the CPU's own checks (equal batch sizes among them: the CPU
kernel reads out of bounds on broadcast batches) are never re-implemented here.
"""
from __future__ import annotations

import math

import torch
from torch.nn.attention import SDPBackend

from torch_musa.attention import cpu_rule, flash
from torch_musa.attention.flash import flash_attention_backward, flash_attention_forward
from torch_musa._driver import pick
from torch_musa.config import CONFIG
from torch_musa.core import backends

__all__ = ["register", "flash_constraint_failures", "max_flash_head_dim", "select_backend",
           "flash_attention_forward", "flash_attention_backward"]

_libs: list = []
_installed = False
_MATH = int(SDPBackend.MATH)
_FLASH = int(SDPBackend.FLASH_ATTENTION)
_OVERRIDEABLE = int(SDPBackend.OVERRIDEABLE)
_FLASH_DTYPES = (torch.float16, torch.bfloat16)


def max_flash_head_dim() -> int:
    """128, or 160 on MUSA arch 3.x and later."""
    return 160 if CONFIG.profile.major >= 3 else 128


def flash_constraint_failures(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                              scale=None, enable_gqa=False, *, ask_pytorch=True,
                              explain=True) -> list[str]:
    """Why the flash kernel cannot run this case ([] when it can).

    musa's own constraints, then (``ask_pytorch``, when those pass) PyTorch's rule for
    the CPU device's flash kernel, so that musa never takes a fused kernel for inputs
    the CPU device refuses one (dropout and a mask's ``requires_grad`` are left out of
    that question: musa's kernel has both). ``explain=False`` skips collecting the
    CPU rule's reasons (one generic line instead), for callers that only test for [].
    """
    fails = _own_flash_failures(query, key, value, attn_mask, enable_gqa)
    if fails or not ask_pytorch:
        return fails
    if explain:
        return [f"PyTorch's CPU rule refuses a fused kernel here: {r}" for r in
                cpu_rule.cpu_flash_refusals(query, key, value, attn_mask, 0.0, is_causal, scale,
                                            enable_gqa, mask_grad=False)]
    if not cpu_rule.cpu_flash_accepts(query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa,
                                      mask_grad=False):
        return ["PyTorch's CPU rule refuses a fused kernel for these inputs"]
    return []


def _own_flash_failures(query, key, value, attn_mask, enable_gqa) -> list[str]:
    fails = []
    if any(t.is_nested for t in (query, key, value)):
        return ["nested tensors are not supported by musa flash attention"]
    if not (query.dim() == key.dim() == value.dim() == 4):
        fails.append(
            f"query, key and value must be 4-D (batch, heads, seq, head_dim); got "
            f"{query.dim()}-D, {key.dim()}-D, {value.dim()}-D")
        return fails
    if query.dtype not in _FLASH_DTYPES:
        fails.append(f"dtype must be float16 or bfloat16; got {query.dtype}")
    elif query.dtype == torch.bfloat16 and not CONFIG.profile.supports_bf16:
        p = CONFIG.profile
        fails.append(f"bfloat16 is not supported by the profile {p.name} (MUSA arch {p.major}.{p.minor})")
    if not (query.dtype == key.dtype == value.dtype):
        fails.append(f"query, key and value must share one dtype; got {query.dtype}, {key.dtype}, {value.dtype}")
    d = query.shape[-1]
    if not (key.shape[-1] == d and value.shape[-1] == d):
        fails.append(f"head_dim of query, key and value must be equal; got {d}, {key.shape[-1]}, {value.shape[-1]}")
    limit = max_flash_head_dim()
    if d > limit:
        p = CONFIG.profile
        fails.append(f"head_dim must be <= {limit} on {p.name} (MUSA arch {p.major}.{p.minor}); got {d}")
    if d % 8 != 0:
        fails.append(f"head_dim must be a multiple of 8; got {d}")
    if not (query.shape[0] == key.shape[0] == value.shape[0]):
        fails.append(f"batch sizes must match; got {query.shape[0]}, {key.shape[0]}, {value.shape[0]}")
    hq, hk, hv = query.shape[1], key.shape[1], value.shape[1]
    if hk != hv:
        fails.append(f"key and value must have the same number of heads; got {hk}, {hv}")
    elif hq != hk:
        if not enable_gqa:
            fails.append(f"query has {hq} heads but key/value have {hk}; pass enable_gqa=True for grouped-query attention")
        elif hk == 0 or hq % hk != 0:
            fails.append(f"with enable_gqa, query heads ({hq}) must be a multiple of key/value heads ({hk})")
    if key.shape[2] != value.shape[2]:
        fails.append(f"key and value must have the same sequence length; got {key.shape[2]}, {value.shape[2]}")
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool and attn_mask.dtype != query.dtype:
            fails.append(f"attn_mask must be bool or {query.dtype}; got {attn_mask.dtype}")
        try:
            torch.broadcast_shapes(attn_mask.shape, (query.shape[0], hq, query.shape[2], key.shape[2]))
        except RuntimeError:
            fails.append(f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to "
                         f"{(query.shape[0], hq, query.shape[2], key.shape[2])}")
    if query.shape[2] == 0 or key.shape[2] == 0:
        fails.append("sequence lengths must be > 0")
    return fails


def select_backend(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False) -> int:
    """The ``_fused_sdp_choice`` rule for musa (see the module docstring)."""
    flash_on = backends.flash_sdp_enabled()  # FLASH_ATTENTION or OVERRIDEABLE
    math_on = backends.math_sdp_enabled()
    if math_on and query.dtype not in _FLASH_DTYPES:
        return _MATH  # flash cannot take it whatever its priority: skip the full constraint list
    fails = None
    for backend in torch._C._get_sdp_priority_order():
        if backend in (_FLASH, _OVERRIDEABLE) and flash_on:
            if fails is None:
                fails = flash_constraint_failures(query, key, value, attn_mask, dropout_p, is_causal,
                                                  scale, enable_gqa, explain=False)
            if not fails:
                return _OVERRIDEABLE
        elif backend == _MATH and math_on:
            return _MATH
    if flash_on and fails:
        fails = flash_constraint_failures(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                          enable_gqa)
        raise RuntimeError(
            "musa flash attention (the only enabled SDPA backend) cannot run this case: "
            + "; ".join(fails)
            + ". Enable the math backend (e.g. sdpa_kernel([SDPBackend.FLASH_ATTENTION, "
              "SDPBackend.MATH])) to fall back automatically.")
    raise RuntimeError(
        "No available kernel for scaled_dot_product_attention on musa: musa provides "
        "SDPBackend.FLASH_ATTENTION (also OVERRIDEABLE) and SDPBackend.MATH, and neither is enabled.")


def _fused_sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                      enable_gqa=False):
    return select_backend(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _flash_forward_op(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
                      return_debug_mask=False, *, scale=None):
    # The kernel's own limits (a direct call of the op chooses nothing).
    fails = _own_flash_failures(query, key, value, attn_bias, enable_gqa=True)
    if fails:
        raise RuntimeError("musa flash attention: " + "; ".join(fails))
    bias = attn_bias
    if bias is not None and bias.dtype == torch.bool:
        bias = _bool_to_additive(bias, query.dtype)
    seed = 0
    if dropout_p > 0.0:
        # From the device's default generator, as CUDA flash takes its philox seed.
        seed = int(torch.randint(0, 2**62, (), device=query.device).item())
    out, lse = flash_attention_forward(query, key, value, bias, dropout_p, is_causal, scale, seed)
    out = _in_layout(out, _layout_of(query, out.shape))
    empty = torch.empty(0, device=query.device)
    philox_seed = torch.tensor(seed, dtype=torch.int64)
    philox_offset = torch.tensor(0, dtype=torch.int64)
    return (out, lse, empty, empty, query.shape[2], key.shape[2], philox_seed, philox_offset,
            torch.empty(0, dtype=query.dtype, device=query.device))


def _flash_backward_op(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                       cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                       philox_offset, *, scale=None):
    bias = attn_bias if (attn_bias is not None and attn_bias.numel() > 0) else None
    if bias is not None and bias.dtype == torch.bool:
        bias = _bool_to_additive(bias, query.dtype)
    need_bias_grad = bool(grad_input_mask[3]) and bias is not None and attn_bias.dtype != torch.bool
    dq, dk, dv, db = flash_attention_backward(
        grad_out, query, key, value, out, logsumexp, bias, dropout_p, is_causal, scale,
        int(philox_seed.item()) if philox_seed.numel() else 0, need_bias_grad)
    if db is None:
        db = torch.empty(0, dtype=query.dtype, device=query.device) if attn_bias is None else \
            torch.zeros_like(attn_bias) if attn_bias.is_floating_point() else None
    dq, dk, dv = (_in_layout(g, torch.empty_like(t)) for g, t in ((dq, query), (dk, key), (dv, value)))
    if attn_bias is not None and db is not None and db.shape == attn_bias.shape:
        db = _in_layout(db, torch.empty_like(attn_bias))  # the meta's empty_like(attn_bias) too
    return dq, dk, dv, db


def _layout_of(query, shape) -> torch.Tensor:
    """An empty output of ``shape`` whose dims are ordered in memory as ``query``'s.

    PyTorch's meta kernel for the overrideable op allocates its output so, and compiled
    code takes the meta's strides as the kernel's: HF GPT-2's query (a transposed view
    of the fused qkv projection) gave a (B, S, H, D)-ordered output there and a
    contiguous one here, which Inductor's stride check refused.
    """
    if tuple(query.shape) == tuple(shape):
        return torch.empty_like(query)
    order = sorted(range(query.dim()), key=lambda i: query.stride(i), reverse=True)
    strides, step = [0] * query.dim(), 1
    for i in reversed(order):
        strides[i] = step
        step *= shape[i]
    return torch.empty_strided(shape, strides, dtype=query.dtype, device=query.device)


def _in_layout(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t``'s values with ``like``'s strides (the backward's meta: ``empty_like`` of the
    input), copied only when they differ."""
    if t.stride() == like.stride():
        return t
    return like.copy_(t)


def _bool_to_additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
          enable_gqa=False):
    # The rule _fused_sdp_choice serves, called directly: a round trip through the
    # dispatcher into a Python kernel cost more than the choice itself.
    choice = select_backend(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    # As PyTorch's composite does before either backend: bool masks become additive.
    mask = attn_mask
    if mask is not None and mask.dtype == torch.bool:
        mask = _bool_to_additive(mask, query.dtype)
    if choice in (_OVERRIDEABLE, _FLASH):
        if attn_mask is not None and is_causal:
            raise RuntimeError(
                "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
        return torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            query, key, value, mask, dropout_p, is_causal, False, scale=scale)[0]
    if query.dtype in _HOST_FLASH_DTYPES and _host_flash_applies(
            query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=mask, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


def _host_flash_applies(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> bool:
    """float32/float64 attention on the math backend: the host driver's kernels are the
    CPU's, so take the CPU's own fused (tiled, online-softmax) kernel exactly where the
    CPU device itself would (float64, grouped-query attention and bool masks included;
    dropout, a mask that requires grad (T5's learned position bias), broadcast batch
    sizes, 3-D masks, ... excluded), and so give the CPU's bits. PyTorch's composite asks
    its rule with the mask as given (a bool one not yet made additive): so does this."""
    return cpu_rule.cpu_choice(query, key, value, attn_mask, dropout_p, is_causal, scale,
                               enable_gqa) == _FLASH


_HOST_FLASH_DTYPES = (torch.float32, torch.float64)


def register() -> None:
    """Install the driver's SDPA kernels (idempotent; ``torch_musa/_setup.py`` calls it):
    musa's own (here) on the host driver, the GPU's under the cuda driver (attention/gpu.py)."""
    pick(host=_register_own, cuda=_register_gpu)()


def _register_gpu() -> None:
    from torch_musa.attention import gpu

    gpu.register()


def _register_own() -> None:
    global _installed
    if _installed:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_fused_sdp_choice", _fused_sdp_choice, "PrivateUse1")
    lib.impl("_scaled_dot_product_fused_attention_overrideable", _flash_forward_op, "PrivateUse1")
    lib.impl("_scaled_dot_product_fused_attention_overrideable_backward", _flash_backward_op, "PrivateUse1")
    lib.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")
    lib.impl("scaled_dot_product_attention", _sdpa, "PrivateUse1")
    _libs.append(lib)
    _installed = True

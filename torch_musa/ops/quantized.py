"""Quantized convolution and linear on musa, with the real torch_musa's dtype conventions.

PyTorch's CPU engines (fbgemm/x86, onednn, qnnpack) take QUInt8 activations and
``quantized::conv2d_add`` only under the onednn engine; the real torch_musa's muDNN
kernels take QInt8 activations (symmetric, zero point 0, as its tests quantize them)
and need no engine. These kernels compute every one of them by definition on musa
tensors: dequantize, the float op, the fused post-op, quantize again. The result is
the CPU's ``dequantize -> op -> quantize_per_tensor`` (the same kernels on the host
driver, so bit-identical there); a real quantized kernel may round the accumulator
differently, by at most one quantization step.

Two families:

- packed weights (QuantizedPrivateUse1): ``quantized::conv1d/2d/3d`` (``.new``) and
  their ``_relu``; ``conv2d_silu.new``, ``conv2d_add``, ``conv2d_add_relu``,
  ``conv2d_add_silu`` (``torch.ao.nn.intrinsic.quantized.ConvSiLU2d`` and friends);
  ``quantized::linear``, ``linear_relu``, ``linear_tanh``, ``linear_leaky_relu``. The
  weights are packed by PyTorch's own prepack (on the CPU, through the fallback); the
  output has the activation's dtype (QInt8 or QUInt8) and the given scale/zero point.
- integer tensors plus their scales (PrivateUse1), the pt2e lowering's ops the real
  package defines: ``quantized::conv``, ``quantized::conv_binary`` and
  ``quantized::linear_per_tensor`` (``qw`` is (K, N) there, scales per output channel).
  Output dtype uint8/int8 is quantized with ``output_scale``/``output_zero_point``
  (round half to even, clamped); any other dtype is the float result in that dtype.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from torch_musa._driver import pick

__all__ = ["kernel"]

_ACTIVATION_DTYPES = (torch.qint8, torch.quint8)
_INT_RANGES = {torch.uint8: (0, 255), torch.int8: (-128, 127)}


# ---- post-ops, by the names the pt2e ops (and onednn) use ----

def _hardtanh(y: Tensor, scalars, _algorithm) -> Tensor:
    lo, hi = (float(s) for s in scalars) if len(scalars) == 2 else (-1.0, 1.0)
    return y.clamp(lo, hi)


def _gelu(y: Tensor, _scalars, algorithm) -> Tensor:
    approximate = algorithm or "none"
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"quantized gelu: algorithm must be 'none' or 'tanh', got {algorithm!r}")
    return F.gelu(y, approximate=approximate)


def _leaky_relu(y: Tensor, scalars, _algorithm) -> Tensor:
    return F.leaky_relu(y, float(scalars[0]) if scalars and scalars[0] is not None else 0.01)


_POST_OPS: dict[str, Callable] = {
    "none": lambda y, s, a: y,
    "": lambda y, s, a: y,
    "relu": lambda y, s, a: torch.relu(y),
    "tanh": lambda y, s, a: torch.tanh(y),
    "swish": lambda y, s, a: F.silu(y),
    "silu": lambda y, s, a: F.silu(y),
    "hardswish": lambda y, s, a: F.hardswish(y),
    "hardtanh": _hardtanh,
    "gelu": _gelu,
    "leaky_relu": _leaky_relu,
}


def _post_op(op: str, name: str | None, y: Tensor, scalars=(), algorithm=None) -> Tensor:
    fn = _POST_OPS.get(name or "none")
    if fn is None:
        raise RuntimeError(f"quantized::{op}: unsupported post op {name!r}; supported: "
                           f"{sorted(n for n in _POST_OPS if n)}")
    return fn(y, list(scalars), algorithm)


# ---- packed weights (quantized activations) ----

def _check_activation(op: str, qx: Tensor) -> None:
    if not qx.is_quantized or qx.dtype not in _ACTIVATION_DTYPES:
        raise RuntimeError(f"quantized::{op}: the input must be a per-tensor quantized tensor of dtype "
                           f"torch.qint8 or torch.quint8, got {'quantized ' if qx.is_quantized else ''}{qx.dtype}")
    if qx.qscheme() not in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        raise RuntimeError(f"quantized::{op}: the input must be quantized per tensor, got {qx.qscheme()}")


def _requantize(y: Tensor, scale: float, zero_point: int, dtype: torch.dtype) -> Tensor:
    return torch.quantize_per_tensor(y, float(scale), int(zero_point), dtype)


#: The cuda driver's prepack is cuDNN's, which pads the output channels (6 became 8 on an H200).
_PREPACK_PADS_FILTERS = pick(host=False, cuda=True)


def _unpadded(weight: Tensor, bias: Tensor | None, channels: int):
    """The filters of a cuDNN-packed weight (the cuda driver's prepack pads the output channels
    with zero filters and zero biases); the accumulator holds the true count."""
    padding = slice(channels, None)
    if 0 < channels < weight.size(0) and not weight[padding].dequantize().any() \
            and (bias is None or not bias[padding].any()):
        return weight[:channels], None if bias is None else bias[:channels]
    return weight, bias


def _packed_conv(op: str, qx: Tensor, packed, qaccum: Tensor | None, post: str) -> Tensor:
    _check_activation(op, qx)
    if packed.transpose():
        raise RuntimeError(f"quantized::{op}: the packed weight is a transposed convolution's; "
                           "use quantized::conv_transpose{1,2,3}d")
    weight, bias = packed.unpack()
    if qaccum is not None and _PREPACK_PADS_FILTERS:
        weight, bias = _unpadded(weight, bias, qaccum.size(1) if qaccum.dim() > 1 else 0)
    x = qx.dequantize()
    spatial = weight.dim() - 2
    one_d = x.dim() == 3 and spatial == 2  # conv1d packs as 2-d with a unit height (dim 2)
    if one_d:
        x = x.unsqueeze(2)
    if x.dim() != spatial + 2:
        raise RuntimeError(f"quantized::{op}: expected a {spatial + 2}-d input for a {spatial}-d convolution "
                           f"weight, got shape {tuple(qx.shape)}")
    conv = (F.conv1d, F.conv2d, F.conv3d)[spatial - 1]
    y = conv(x, weight.dequantize().to(x.device), None if bias is None else bias.to(x.device),
             packed.stride(), packed.padding(), packed.dilation(), packed.groups())
    if one_d:
        y = y.squeeze(2)
    if qaccum is not None:
        _check_activation(op, qaccum)
        if qaccum.shape != y.shape:
            raise RuntimeError(f"quantized::{op}: qaccum has shape {tuple(qaccum.shape)}, the convolution's "
                               f"output {tuple(y.shape)}")
        y = y + qaccum.dequantize()
    return _post_op(op, post, y)


def _conv_kernel(op: str, post: str, binary: bool):
    if binary:
        def conv_add(qx, qaccum, packed_weight, output_scale, output_zero_point):
            y = _packed_conv(op, qx, packed_weight, qaccum, post)
            return _requantize(y, output_scale, output_zero_point, qx.dtype)
        return conv_add

    def conv(qx, packed_weight, output_scale, output_zero_point):
        y = _packed_conv(op, qx, packed_weight, None, post)
        return _requantize(y, output_scale, output_zero_point, qx.dtype)
    return conv


def _linear_kernel(op: str, post: str):
    def linear(X, W_prepack, Y_scale_i, Y_zero_point_i, *post_args):
        _check_activation(op, X)
        weight, bias = W_prepack.unpack()
        x = X.dequantize()
        y = F.linear(x, weight.dequantize().to(x.device), None if bias is None else bias.to(x.device))
        return _requantize(_post_op(op, post, y, post_args), Y_scale_i, Y_zero_point_i, X.dtype)
    return linear


# ---- integer tensors with scales (the pt2e ops) ----

def _dequant_int(op: str, name: str, q: Tensor, scale, zero_point) -> Tensor:
    if q.is_quantized or q.is_floating_point() or q.is_complex():
        raise RuntimeError(f"quantized::{op}: {name} must be an integer tensor (uint8 or int8), got {q.dtype}")
    return (q.float() - zero_point) * scale


def _per_channel(t, shape: tuple[int, ...]) -> Tensor | float:
    return t.float().reshape(shape) if isinstance(t, Tensor) and t.numel() > 1 else float(t)


def _output(y: Tensor, output_scale: float, output_zero_point: int, dtype: torch.dtype) -> Tensor:
    if dtype not in _INT_RANGES:
        return y.to(dtype)
    lo, hi = _INT_RANGES[dtype]
    return torch.round(y / output_scale + output_zero_point).clamp_(lo, hi).to(dtype)


def _float_conv(op, qx, x_scale, x_zero_point, qw, w_scale, w_zero_point, bias, stride, padding, dilation, groups):
    if qw.dim() != qx.dim() or qx.dim() not in (3, 4, 5):
        raise RuntimeError(f"quantized::{op}: expected a 3-d, 4-d or 5-d qx and a weight of the same rank, "
                           f"got qx {tuple(qx.shape)} and qw {tuple(qw.shape)}")
    if qw.is_mkldnn:
        qw = qw.to_dense()
    per_out = (-1,) + (1,) * (qw.dim() - 1)
    x = _dequant_int(op, "qx", qx, float(x_scale), int(x_zero_point))
    w = (qw.to(x.device).float() - _per_channel(w_zero_point, per_out)) * _per_channel(w_scale, per_out)
    conv = (F.conv1d, F.conv2d, F.conv3d)[qx.dim() - 3]
    return conv(x, w, None if bias is None else bias.float(), stride, padding, dilation, groups)


def conv(qx, x_scale, x_zero_point, qw, w_scale, w_zero_point, bias, stride, padding, dilation, groups,
         output_scale, output_zero_point, output_dtype, attr, scalars, algorithm):
    """quantized::conv: ``attr`` applied to the float convolution, quantized to ``output_dtype``
    (default: qx's)."""
    y = _float_conv("conv", qx, x_scale, x_zero_point, qw, w_scale, w_zero_point, bias, stride, padding,
                    dilation, groups)
    y = _post_op("conv", attr, y, scalars, algorithm)
    return _output(y, output_scale, output_zero_point, output_dtype or qx.dtype)


def conv_binary(qx, x_scale, x_zero_point, qw, w_scale, w_zero_point, qaccum, bias, stride, padding, dilation,
                groups, output_scale, output_zero_point, output_dtype, accum_scale, accum_zero_point,
                binary_attr, alpha, unary_attr, unary_scalars, unary_algorithm):
    """quantized::conv_binary: ``conv + alpha * dequantized qaccum``, then ``unary_attr``."""
    if binary_attr not in ("sum", "add"):
        raise RuntimeError(f"quantized::conv_binary: binary_attr must be 'sum' or 'add', got {binary_attr!r}")
    dtype = output_dtype or qx.dtype
    if dtype in (torch.float32, torch.bfloat16) and accum_scale != 1.0:
        raise RuntimeError("quantized::conv_binary: with a float32 or bfloat16 output, accum_scale must be 1.0, "
                           f"got {accum_scale}")
    y = _float_conv("conv_binary", qx, x_scale, x_zero_point, qw, w_scale, w_zero_point, bias, stride, padding,
                    dilation, groups)
    accum = qaccum.float() if qaccum.is_floating_point() else (qaccum.float() - accum_zero_point) * accum_scale
    if accum.shape != y.shape:
        raise RuntimeError(f"quantized::conv_binary: qaccum has shape {tuple(qaccum.shape)}, the convolution's "
                           f"output {tuple(y.shape)}")
    y = y + (1.0 if alpha is None else float(alpha)) * accum
    y = _post_op("conv_binary", unary_attr, y, unary_scalars, unary_algorithm)
    return _output(y, output_scale, output_zero_point, dtype)


def linear_per_tensor(qx, x_scale, x_zero_point, qw, w_scale, w_zero_point, bias, output_scale,
                      output_zero_point, output_dtype, post_op_name, post_op_args, post_op_algorithm):
    """quantized::linear_per_tensor: ``qx (..., K) @ qw (K, N)`` dequantized (``w_scale`` and
    ``w_zero_point`` per N), plus bias, post op, quantized to ``output_dtype`` (default: qx's)."""
    if qw.is_mkldnn:
        qw = qw.to_dense()
    if qx.dim() < 2 or qw.dim() != 2 or qx.shape[-1] != qw.shape[0]:
        raise RuntimeError("quantized::linear_per_tensor: expected qx (..., K) with at least 2 dims and qw (K, N), "
                           f"got qx {tuple(qx.shape)} and qw {tuple(qw.shape)}")
    x = _dequant_int("linear_per_tensor", "qx", qx, float(x_scale), int(x_zero_point))
    w = (qw.to(x.device).float() - _per_channel(w_zero_point, (1, -1))) * _per_channel(w_scale, (1, -1))
    y = torch.matmul(x, w)
    if bias is not None:
        y = y + bias.float()
    y = _post_op("linear_per_tensor", post_op_name, y, post_op_args, post_op_algorithm)
    return _output(y, output_scale, output_zero_point, output_dtype or qx.dtype)


_KERNELS: dict[str, Callable] = {
    "conv1d": _conv_kernel("conv1d", "none", False),
    "conv1d_relu": _conv_kernel("conv1d_relu", "relu", False),
    "conv2d.new": _conv_kernel("conv2d", "none", False),
    "conv2d_relu.new": _conv_kernel("conv2d_relu", "relu", False),
    "conv2d_silu.new": _conv_kernel("conv2d_silu", "silu", False),
    "conv3d.new": _conv_kernel("conv3d", "none", False),
    "conv3d_relu.new": _conv_kernel("conv3d_relu", "relu", False),
    "conv2d_add": _conv_kernel("conv2d_add", "none", True),
    "conv2d_add_relu": _conv_kernel("conv2d_add_relu", "relu", True),
    "conv2d_add_silu": _conv_kernel("conv2d_add_silu", "silu", True),
    "linear": _linear_kernel("linear", "none"),
    "linear_relu": _linear_kernel("linear_relu", "relu"),
    "linear_tanh": _linear_kernel("linear_tanh", "tanh"),
    "linear_leaky_relu": _linear_kernel("linear_leaky_relu", "leaky_relu"),
    "conv": conv,
    "conv_binary": conv_binary,
    "linear_per_tensor": linear_per_tensor,
}


def kernel(op: str):
    """The kernel of ``quantized::<op>`` (musa_functions.yaml names this factory and gives the
    schemas of the ops PyTorch lacks; ops/kernels.py defines and registers them)."""
    name = op.split("::", 1)[-1]
    if name not in _KERNELS:
        raise KeyError(f"torch_musa.ops.quantized has no kernel for {op!r}; it has {sorted(_KERNELS)}")
    return _KERNELS[name]

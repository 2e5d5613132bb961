"""``torch.histc`` on integer tensors, as CUDA computes it.

CUDA's ``histc`` takes every integer dtype (``AT_DISPATCH_ALL_TYPES``; OpInfo's
``dtypesIfCUDA`` lists int8..int64 and uint8), the CPU's only floating ones, so on
the host driver an integer histc reached the CPU kernel through the fallback and
raised ``"histogram_cpu" not implemented for 'Int'``. Code written for CUDA relies
on it: Hugging Face's grouped-mm MoE experts (Mixtral, Qwen2-MoE, ...) count tokens
per expert with ``torch.histc(expert_ids.int(), ...)`` on every device but CPU/MPS.

Integer inputs follow CUDA's kernel (``_histc_cuda_template``): bounds converted to
int64 and then to the input dtype; ``min == max`` takes the data's min and max, and
an empty range widens by one each side; elements outside ``[min, max]`` are not
counted; bin = ``(x - min) * bins / (max - min)`` in int64 (the last bin includes
``max``); the result has the input's dtype. Every other dtype runs the CPU kernel
unchanged, as the fallback ran it. Host driver only: the cuda driver serves histc with the
generated wrapper of CUDA's own kernel (musa_functions.yaml lists both).
"""
from __future__ import annotations

import torch
from torch._prims_common.wrappers import _maybe_resize_out

from torch_musa import _C

#: The integer dtypes CUDA's histc dispatches (AT_DISPATCH_ALL_TYPES).
INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _wrap(value: int, dtype: torch.dtype) -> int:
    """``value`` converted to ``dtype`` as C++ converts an int64 (two's complement)."""
    info = torch.iinfo(dtype)
    span = info.max - info.min + 1
    return (value - info.min) % span + info.min


def _int64(scalar) -> int:
    """``Scalar.to<int64_t>()``: truncation toward zero, an error where it overflows."""
    try:
        value = int(scalar)
    except (OverflowError, ValueError):
        value = None
    if value is None or not -(2**63) <= value < 2**63:
        raise RuntimeError(f"value cannot be converted to type int64_t without overflow: {scalar}")
    return value


def integer_histc(x: torch.Tensor, bins: int, min, max) -> torch.Tensor:
    """CUDA's histc of an integer CPU tensor (see the module docstring)."""
    if bins <= 0:
        raise RuntimeError("bins must be > 0")
    lo, hi = _int64(min), _int64(max)
    lo_v, hi_v = _wrap(lo, x.dtype), _wrap(hi, x.dtype)
    if lo == hi and x.numel() > 0:
        lo_v, hi_v = int(x.min()), int(x.max())
    if lo_v == hi_v:
        lo_v, hi_v = _wrap(lo_v - 1, x.dtype), _wrap(hi_v + 1, x.dtype)
    if not lo_v < hi_v:
        raise RuntimeError("max must be larger than min")
    v = x.reshape(-1).to(torch.int64)
    v = v[(v >= lo_v) & (v <= hi_v)]
    b = ((v - lo_v) * bins).div(hi_v - lo_v, rounding_mode="trunc").clamp_(max=bins - 1)
    return torch.bincount(b, minlength=bins).to(x.dtype)


def histc(self: torch.Tensor, bins: int = 100, min=0, max=0) -> torch.Tensor:
    with _C._KernelSpan("aten::histc"):  # torch.profiler's device time of the op
        host = _C._kernel_alias(self)
        if self.dtype in INTEGER_DTYPES:
            result = integer_histc(host, bins, min, max)
        else:
            result = torch.ops.aten.histc.default(host, bins, min, max)
        out = torch.empty(result.shape, dtype=result.dtype, device=self.device)
        _C._kernel_alias(out).copy_(result)
        return out


def histc_out(self: torch.Tensor, bins: int = 100, min=0, max=0, *, out: torch.Tensor) -> torch.Tensor:
    result = histc(self, bins, min, max)
    _maybe_resize_out(out, result.shape)  # at::native::resize_output, its warning included
    return out.copy_(result)


def kernel(op: str):
    """The kernel of ``op`` (musa_functions.yaml names this factory; ops/kernels.py registers it)."""
    return {"histc": histc, "histc.out": histc_out}[op]

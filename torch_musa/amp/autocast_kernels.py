"""Autocast on the ``AutocastPrivateUse1`` dispatch key.

PyTorch ships per-op autocast kernels for CUDA, CPU, XPU, MPS, ... but none for
PrivateUse1, and no fallthrough either: without this module any op in a
``torch.autocast("musa")`` region fails. ``install()`` registers

* a fallthrough for every op (ops outside the policy run in their input dtype);
* CUDA's per-op policy (lower precision, float32, float32 through ``dtype=``,
  widest type, refused) from ATen's own op lists and cast wrapper, in C++
  (``csrc/aten/autocast_kernels.cpp``): the same cast cache as CUDA's (float32
  leaf tensors that require grad, cast to the lower precision, while
  ``torch.is_autocast_cache_enabled()``), dropped when the outermost region exits.

The kernels are C++ because they run on every matmul, softmax and norm of an
autocast step: as Python kernels they cost 7-8 us of host time per op.
"""
from __future__ import annotations

import torch

from torch_musa import _C
from torch_musa.config import CONFIG

KEY = "AutocastPrivateUse1"
_libs: list = []
_registered_ops: dict[str, str] = {}


def _check_dtype(dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16:
        p = CONFIG.profile
        if not p.supports_bf16:
            raise RuntimeError(
                f"musa autocast: bfloat16 is not supported by the hardware profile {p.name} "
                f"(MUSA arch {p.major}.{p.minor}; bfloat16 needs arch >= 2.2). "
                "Use dtype=torch.float16."
            )


def install() -> None:
    """Register the fallthrough and the per-op kernels (idempotent)."""
    if _registered_ops:
        return
    fallback = torch.library.Library("_", "IMPL")
    try:
        fallback.fallback(torch.library.fallthrough_kernel, KEY)
    except RuntimeError as e:  # a fallback for the key exists already (e.g. from C++): keep it
        if "multiple" not in str(e).lower():
            raise
    _libs.append(fallback)
    _registered_ops.update(_C._register_autocast_kernels())


def registered_ops() -> dict[str, str]:
    """``{"op.overload": policy}`` for every op with a musa autocast kernel."""
    return dict(_registered_ops)

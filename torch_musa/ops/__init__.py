"""The operator layer: which ops musa serves natively, which fall back, and how.

``fallback_stats()`` says which ops reached the CPU fallback and how often;
``coverage()`` lists the registry's native ops (with the dtypes the hardware
profile lets them compute) next to the ops that fell back.
"""
from __future__ import annotations

import torch

from torch_musa import _C
from torch_musa.config import CONFIG


def fallback_stats() -> dict[str, int]:
    """Calls per op that ran through the CPU fallback since start (or reset)."""
    return dict(sorted(_C._fallback_counts(), key=lambda kv: (-kv[1], kv[0])))


def reset_fallback_stats() -> None:
    _C._reset_fallback_counts()


_FLOAT_AND_INT = [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                  torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


def coverage() -> dict:
    """{'native': {op: [dtypes]}, 'fallback': {op: calls}, 'profile': name}."""
    from torch_musa.ops import _generated

    lacking = set(CONFIG.profile.unsupported_dtypes())
    dtypes = [str(d).replace("torch.", "") for d in _FLOAT_AND_INT if d not in lacking]
    native = {f"aten::{name}": dtypes for name in _generated.NATIVE_ATEN}
    for namespace, schema, _, _ in _generated.CUSTOMIZED:
        native[f"{namespace}::{schema.split('(')[0]}"] = dtypes
    return {"profile": CONFIG.profile.name, "native": native, "fallback": fallback_stats()}

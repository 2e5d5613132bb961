"""The tolerance a musa result is held to against its reference, per dtype.

One policy for every comparison the package makes: the OpInfo and module_db
sweeps, OpTest (also where a half-precision result meets a float32 reference,
or float64 was computed in float32 under double casting), musa-bench's
correctness check and CompareWithCPU's defaults.

The values are ``torch.testing.assert_close``'s defaults (rtol about ten units
in the last place of float32, one of float16, two of bfloat16), except the
half-precision atol: a result that cancels to near zero carries the rounding
of its operands, about one unit in the last place at 1 (float16 2**-10,
bfloat16 2**-7), so atol is 1e-3 and 1e-2 there instead of 1e-5. Float8
formats, which torch.testing does not cover, get a coarse 3e-2 / 1e-2.
Integers and bool compare exactly.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

import torch

__all__ = ["TOLERANCES", "tolerance"]

_HALF = (1e-3, 1e-3)
_FLOAT8 = (3e-2, 1e-2)

#: dtype -> (rtol, atol). Frozen: a comparison that needs more says so at its call.
TOLERANCES: Mapping[torch.dtype, tuple[float, float]] = MappingProxyType({
    torch.float64: (1e-7, 1e-7),
    torch.complex128: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.float16: _HALF,
    torch.complex32: _HALF,
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float8_e4m3fn: _FLOAT8,
    torch.float8_e4m3fnuz: _FLOAT8,
    torch.float8_e5m2: _FLOAT8,
    torch.float8_e5m2fnuz: _FLOAT8,
})


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for ``dtype``; ``(0.0, 0.0)`` (exact) for integers, bool and
    any dtype the policy does not list."""
    return TOLERANCES.get(dtype, (0.0, 0.0))

"""``torch.jit.trace``'s default check on a profile without float64.

The checker (``torch.jit._trace._check_trace``) runs the trace, the Python
function and a second trace, then compares their outputs with
``torch.testing.assert_close`` after widening them to float64 / complex128 on
their own device. On a profile that lacks those dtypes the comparison raises
instead of comparing, although the user never asked for float64. While a trace
check runs on this thread, ``assert_close`` given two musa tensors of one
device, one of them in a dtype the profile lacks, compares host copies: the
same float64 comparison, bit for bit, so mismatches and nondeterminism are
still reported as on the CPU (``TracerWarning`` / ``TracingCheckError``). The
model runs inside the check, and every comparison outside it, are unchanged.
A profile with every dtype installs nothing.
"""
from __future__ import annotations

import functools
import threading

import torch
import torch.jit._trace as _trace
import torch.testing

from torch_musa.config import CONFIG

_tls = threading.local()


def _needs_host(actual, expected, unsupported) -> bool:
    return (
        isinstance(actual, torch.Tensor)
        and isinstance(expected, torch.Tensor)
        and actual.device.type == "musa"
        and actual.device == expected.device
        and (actual.dtype in unsupported or expected.dtype in unsupported)
    )


def install() -> None:
    unsupported = frozenset(CONFIG.profile.unsupported_dtypes())
    if not unsupported:
        return
    original_check = _trace._check_trace
    original_assert_close = torch.testing.assert_close

    @functools.wraps(original_check)
    def _check_trace(*args, **kwargs):
        outer = getattr(_tls, "checking", False)
        _tls.checking = True
        try:
            return original_check(*args, **kwargs)
        finally:
            _tls.checking = outer

    @functools.wraps(original_assert_close)
    def assert_close(actual, expected, *args, **kwargs):
        if getattr(_tls, "checking", False) and _needs_host(actual, expected, unsupported):
            actual, expected = actual.cpu(), expected.cpu()
        return original_assert_close(actual, expected, *args, **kwargs)

    _trace._check_trace = _check_trace
    torch.testing.assert_close = assert_close

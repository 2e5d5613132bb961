"""Python kernels on aten ops for musa, registered through one ``torch.library`` object.

The ``Library`` returned must be kept alive by its caller: dropping it unregisters the
kernels. ``override`` silences PyTorch's "overriding a previously registered kernel"
warning where a kernel replaces the boxed fallback's registration on purpose.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import torch

__all__ = ["register"]


def register(impls: Iterable[tuple[str, Callable, str]], *, override: bool = False) -> torch.library.Library:
    """Register each ``(op name, kernel, dispatch key)`` on aten; returns the Library."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        if override:
            warnings.simplefilter("ignore")
        for name, kernel, key in impls:
            lib.impl(name, kernel, key)
    return lib

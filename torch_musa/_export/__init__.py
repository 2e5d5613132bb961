"""``torch_musa._export``: the real torch_musa's ``aot_load(so_path, device)``.

For ``"cpu"`` it is ``torch._export.aot_load``; for musa it raises
``torch_musa._inductor.aoti.UNSUPPORTED`` (AOTInductor has no C shim for a
PrivateUse1 device, so no musa model library can be built or run).
"""
from __future__ import annotations

from collections.abc import Callable

from torch_musa._inductor.package import _check_device

__all__ = ["aot_load"]


def aot_load(so_path: str, device: str) -> Callable:
    """Load a library made by ``aot_compile`` and return a callable running it."""
    _check_device(device)
    import torch._export  # noqa: PLC0415

    return torch._export.aot_load(so_path, device)

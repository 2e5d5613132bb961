"""``torch_musa._inductor.package``: the real torch_musa's AOTInductor package loader.

``load_package(path, device)`` keeps upstream's signature. For ``"cpu"`` it is
``torch._inductor.package.load_package``; for musa it raises, as every AOTInductor
entry point of this project does (``torch_musa._inductor.aoti.UNSUPPORTED``): the C shim
AOTInductor compiles against has no functions for a PrivateUse1 device.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import torch

from torch_musa._inductor.aoti import UNSUPPORTED

__all__ = ["load_package"]


def _check_device(device: str) -> None:
    musa = torch._C._get_privateuse1_backend_name()
    if device == musa or device.startswith(f"{musa}:"):
        raise RuntimeError(UNSUPPORTED)
    if device != "cpu":
        raise RuntimeError("Unsupported device " + device)


def load_package(path, device: str) -> Callable:
    """Load an AOTInductor package (a ``.pt2`` archive) and return its runner."""
    if isinstance(path, (str, os.PathLike)) and os.fspath(path).endswith(".so"):
        raise RuntimeError("Unable to load .so. It should be a .pt2 format or a directory.")
    _check_device(device)
    from torch._inductor.package import load_package as _load_package  # noqa: PLC0415

    return _load_package(path)

"""``torch_musa._inductor.package``: the real torch_musa's AOTInductor package loader.

``load_package(path, device)`` keeps its signature. A package made from a musa
model names musa as its device (``aoti.py``), so PyTorch's own loader
(``torch._inductor.package.load_package``) runs it through the runner
libtorch_musa registers for ``musa``; ``device`` picks the musa device index,
or ``"cpu"`` loads a CPU package as upstream does.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import torch

__all__ = ["load_package"]


def _device_index(device: str) -> int:
    """-1 for ``"cpu"`` and ``"musa"`` (the device the inputs are on), else the index."""
    musa = torch._C._get_privateuse1_backend_name()
    if device == "cpu" or device == musa:
        return -1
    if device.startswith(f"{musa}:") and device[len(musa) + 1:].isdigit():
        return int(device[len(musa) + 1:])
    raise RuntimeError(f"Unsupported device {device}: load_package takes 'cpu', '{musa}' "
                       f"or '{musa}:<index>'")


def load_package(path, device: str) -> Callable:
    """Load an AOTInductor package (a ``.pt2`` archive) and return its runner."""
    if isinstance(path, (str, os.PathLike)) and os.fspath(path).endswith(".so"):
        raise RuntimeError("Unable to load .so. It should be a .pt2 format or a directory.")
    index = _device_index(device)
    from torch._inductor.package import load_package as _load_package  # noqa: PLC0415

    return _load_package(path, device_index=index)

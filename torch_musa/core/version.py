"""``torch.musa.version`` and ``torch.version.musa``: which MUSA runtime serves the device.

Under the cuda driver that is the CUDA runtime PyTorch was built with; on the
host driver the runtime is this package's own, so its version is the package's.
"""
from __future__ import annotations

import importlib.metadata

import torch

from torch_musa._driver import NAME, pick


def _package_version() -> str:
    try:
        return importlib.metadata.version("torch_musa")
    except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


__version__ = _package_version()
#: The runtime's version string (``torch.version.musa``).
musa: str | None = pick(host=__version__, cuda=torch.version.cuda)
driver: str = NAME


def install() -> None:
    """Set ``torch.version.musa``, as the real torch_musa does."""
    torch.version.musa = musa

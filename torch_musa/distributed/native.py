"""The C++ hot path of mccl (csrc/mccl_ops.cpp): all_reduce, broadcast,
all_gather_into_tensor and reduce_scatter_tensor on musa tensors without a
Python frame per call (the Python kernels cost ~25 us of CPU per collective,
which shows at small message sizes).

Where it comes from, first match wins:

* compiled into ``torch_musa._C`` (the file is in the extension's sources):
  ``torch.ops.mccl.native_ops`` exists as soon as torch_musa is imported;
* ``MCCL_NATIVE=1``: built here on first use with ``torch.utils.cpp_extension``
  (about 30 s once, cached under the torch extensions directory) and loaded.

``MCCL_NATIVE=0`` turns it off (the Python kernels then serve every op).
"""
from __future__ import annotations

import os

import torch

from torch_musa.config import CONFIG

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "mccl_ops.cpp")
_NAME = "torch_musa_mccl_ops"


def _registered() -> list[str]:
    try:
        return list(torch.ops.mccl.native_ops())
    except (AttributeError, RuntimeError):
        return []


def mode() -> str:
    """``"0"`` (off), ``"1"`` (build if needed) or ``"auto"`` (only if compiled in): MCCL_NATIVE."""
    return CONFIG.mccl_native


def build_directory() -> str:
    from torch.utils.cpp_extension import _get_build_directory

    return _get_build_directory(_NAME, verbose=False)


def _cached_library() -> str | None:
    """The built library when it is newer than the source (skips ninja's check)."""
    try:
        path = os.path.join(build_directory(), _NAME + ".so")
        if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(_SRC):
            return path
    except OSError:
        pass
    return None


def load(build: bool = True) -> list[str]:
    """Make the native kernels available; return the c10d ops they serve ([] if none)."""
    ops = _registered()
    if ops or not build:
        return ops
    lib = _cached_library()
    if lib is not None:
        torch.ops.load_library(lib)
    else:
        from torch.utils.cpp_extension import load as _load

        _load(name=_NAME, sources=[_SRC], extra_cflags=["-O2"], is_python_module=False, verbose=False)
    return _registered()


def native_ops() -> list[str]:
    """The c10d ops the C++ kernels serve in this process, per ``MCCL_NATIVE``."""
    m = mode()
    if m == "0":
        return []
    return load(build=m == "1")

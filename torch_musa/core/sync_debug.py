"""``torch.musa.set_sync_debug_mode`` / ``get_sync_debug_mode``, as torch.cuda has them.

The runtime (csrc/aten/kernel_call.cpp) checks one process-wide flag where the
host waits for the device: ``.item()``, a blocking copy between musa and the
host (``.cpu()``, ``torch.tensor(..., device="musa")``), a stream's
``synchronize()``, boolean-mask indexing and the ops whose result size depends
on the data (``nonzero``, ``masked_select``, ``unique``, ...). Like CUDA, an
explicit ``torch.musa.synchronize()``, event waits and non-blocking copies
neither warn nor raise.
"""
from __future__ import annotations

from torch_musa import _C

_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Warn ("warn" or 1), raise ("error" or 2) or stay silent ("default" or 0)
    on operations that synchronise the host with a musa device."""
    if isinstance(debug_mode, str):
        if debug_mode not in _MODES:
            raise RuntimeError(
                "invalid value of debug_mode, expected one of `default`, `warn`, `error`"
            )
        debug_mode = _MODES[debug_mode]
    _C._set_sync_debug_mode(int(debug_mode))


def get_sync_debug_mode() -> int:
    """The current mode: 0 (default), 1 (warn) or 2 (error)."""
    return _C._get_sync_debug_mode()

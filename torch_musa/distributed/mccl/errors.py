"""mccl's errors: one exception type, and messages naming the collective, the rank and
the local tensors, with a hint at the likely cause (the C++ kernels word theirs alike)."""
from __future__ import annotations

import torch

from torch_musa.config import CONFIG


class MCCLError(RuntimeError):
    """A collective on the mccl backend failed (a peer died, timed out or disagreed)."""


def describe(tensors) -> str:
    """``[(4,):float32, [(2, 3):int64]]``: shapes and dtypes, nested as given."""
    out = []
    for t in tensors:
        if isinstance(t, (list, tuple)):
            out.append(describe(t))
        elif isinstance(t, torch.Tensor):
            out.append(f"{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}")
    return "[" + ", ".join(out) + "]"


def named_error(name, backend, tensors, exc) -> MCCLError:
    """``exc`` as an MCCLError naming collective ``name``, this rank and ``tensors``."""
    if isinstance(exc, MCCLError):
        return exc
    msg = str(exc)
    try:
        where = f"rank {backend.rank()} of {backend.size()}"
    except Exception:  # noqa: BLE001
        where = "this rank"
    if tensors and isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    hint = ""
    low = msg.lower()
    if "timed out" in low or "timeout" in low:
        hint = (" (a peer did not join the collective within the process group timeout: it may "
                "have died, be stuck, or be running a different collective)")
    elif "connection closed" in low or "connection reset" in low or "broken pipe" in low:
        hint = " (a peer process exited or closed its connection)"
    elif "preamble" in low or "size mismatch" in low or "mismatch" in low or "nbytes" in low:
        checks_all = CONFIG.mccl_check_collectives == "all"
        hint = (" (the ranks passed tensors of different shapes or dtypes"
                + ("" if checks_all or "Detected mismatch" in msg else
                   "; set MCCL_CHECK_COLLECTIVES=all for a cross-rank check before each collective") + ")")
    return MCCLError(f"mccl {name} failed on {where}, local tensors {describe(tensors)}{hint}: {msg}")

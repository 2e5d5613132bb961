"""mccl's errors: one exception type, and messages naming the collective, the rank and
the local tensors, with a hint at the likely cause (the C++ kernels word theirs alike)."""
from __future__ import annotations

import torch

from torch_musa.config import CONFIG
from torch_musa.distributed import _C as _mccl_C


class MCCLError(RuntimeError):
    """A collective on the mccl backend failed (a peer died, timed out or disagreed)."""


class InvalidPeerError(MCCLError, ValueError):
    """A point-to-point call named a peer that is no rank of its group (or this rank, which
    Gloo cannot reach). A ValueError, as torch.distributed's own peer errors ("Global rank 2
    is not part of group", "destination rank should not be the same as the rank of the
    current process"), and an MCCLError."""


def describe(tensors) -> str:
    """``[(4,):float32, [(2, 3):int64]]``: shapes and dtypes, nested as given."""
    out = []
    for t in tensors:
        if isinstance(t, (list, tuple)):
            out.append(describe(t))
        elif isinstance(t, torch.Tensor):
            out.append(f"{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}")
    return "[" + ", ".join(out) + "]"


def error_head(name, backend, tensors) -> str:
    """``mccl all_to_all failed on rank 0 of 2, local tensors [...]``: what an error of
    collective ``name`` starts with (the backend's message and a hint follow)."""
    try:
        where = f"rank {backend.rank()} of {backend.size()}"
    except Exception:  # noqa: BLE001
        where = "this rank"
    if tensors is not None and isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    return f"mccl {name} failed on {where}, local tensors {describe(tensors or [])}"


def checks_all() -> bool:
    """Whether every collective is checked across ranks first (then no hint suggests it)."""
    return CONFIG.mccl_check_collectives == "all"


def named(head, exc) -> MCCLError:
    """``exc`` as an MCCLError starting with ``head`` (:func:`error_head`), with a hint at its
    cause. The hint comes from the C++ side (``_error_hint``), which words the errors of
    futures completed off the Python threads the same way."""
    if isinstance(exc, MCCLError):
        return exc
    msg = str(exc)
    return MCCLError(f"{head}{_mccl_C._error_hint(msg, checks_all())}: {msg}")


def named_error(name, backend, tensors, exc) -> MCCLError:
    """``exc`` as an MCCLError naming collective ``name``, this rank and ``tensors``."""
    if isinstance(exc, MCCLError):
        return exc
    return named(error_head(name, backend, tensors), exc)

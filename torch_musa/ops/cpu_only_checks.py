"""Checks that PyTorch's composite ops make only when the input is on the CPU.

Some CompositeImplicitAutograd ops validate their arguments only for CPU tensors,
to spare an accelerator a host synchronisation (``quantile_compute`` in
``aten/src/ATen/native/Sorting.cpp`` checks that every ``q`` lies in ``[0, 1]``
only ``if (self.device().is_cpu())``). On musa the composite runs on musa tensors
and skipped the check: ``torch.quantile(x, torch.tensor([-0.05]))`` returned a
value where the CPU raises, and ``q = 1.5`` an out-of-bounds index error. The
host driver's memory is the host's, so the check costs nothing there: these
kernels make it, then run PyTorch's own composite (``OpOverload.decompose``).
Host driver only: the cuda driver keeps CUDA's no-sync behaviour.
"""
from __future__ import annotations

import torch


def _check_q(q: torch.Tensor) -> None:
    if q.numel() and not bool(q.ge(0).logical_and_(q.le(1)).all()):
        raise RuntimeError("quantile() q values must be in the range [0, 1]")


def _checked(overload: torch._ops.OpOverload):
    def kernel(self, q, *args, **kwargs):
        _check_q(q)
        return overload.decompose(self, q, *args, **kwargs)

    kernel.__name__ = overload.__name__
    return kernel


def kernel(op: str):
    """``quantile``/``nanquantile`` (and ``.out``) with the check (musa_functions.yaml names this
    factory; ops/kernels.py registers it on musa's backend and autograd keys)."""
    base, _, overload = op.partition(".")
    return _checked(getattr(getattr(torch.ops.aten, base), overload or "default"))

"""The tensors the engine reads: musa tensors aliased as tensors of the kernel device.

On the host driver an alias is a CPU tensor over the musa tensor's bytes (same
sizes, strides, offset): Gloo reads and writes musa memory in place, nothing is
copied. Under the cuda driver it is a CUDA tensor over the same bytes (NCCL's
input). Gloo cannot read GPU memory, so Gloo calls there are *staged*: each
musa tensor of the call gets one host copy, written back once the collective is
done (``MCCL_STAGE_GLOO=1`` stages on the host driver too, which is how CI runs
that path). The C++ kernels do the same (``csrc/mccl_ops.cpp``: ``Stage``).
"""
from __future__ import annotations

import threading

import torch
from torch._C import _distributed_c10d as _c10d

from torch_musa import _C
from torch_musa._driver import KERNEL_DEVICE
from torch_musa.config import CONFIG

#: The device type of the aliases: ``"cpu"`` (host driver) or ``"cuda"`` (cuda driver,
#: where completion is stream-ordered).
ALIAS_DEVICE = KERNEL_DEVICE
#: Gloo calls run on host copies of the musa tensors (always where the aliases are not
#: host memory, which Gloo cannot read).
STAGE_GLOO = ALIAS_DEVICE != "cpu" or CONFIG.mccl_stage_gloo

_kernel_alias = _C._kernel_alias  # the runtime's one alias function
_TL = threading.local()


def _staged_alias(t):
    """A host copy of ``t`` while a Gloo call is being staged (one per tensor and
    call, written back by :func:`run_staged`), else the kernel-device alias."""
    scope = getattr(_TL, "scope", None)
    if scope is None:
        return _kernel_alias(t)
    hit = scope.get(id(t))
    if hit is None:
        hit = scope[id(t)] = (t, t.cpu())
    return hit[1]


_alias = _staged_alias if STAGE_GLOO else _kernel_alias


def alias(t):
    """What the engine reads for ``t``: its alias if it is a musa tensor, else ``t``."""
    return _alias(t) if t.device.type == "musa" else t


def alias_list(ts):
    return [_alias(t) if t.device.type == "musa" else t for t in ts]


def alias_lists(tss):
    return [[_alias(t) if t.device.type == "musa" else t for t in ts] for ts in tss]


def staging_scope():
    """The host copies of the Gloo call being staged on this thread ({id: (musa, host)}), or None."""
    return getattr(_TL, "scope", None)


def run_staged(fn, args, kwargs):
    """Run the kernel ``fn`` on host copies of its musa tensors and write them back once
    its collective is done: the call completes before it returns."""
    scope = _TL.scope = {}
    try:
        res = fn(*args, **kwargs)
        _TL.scope = None
        if not scope:  # nothing staged, or point-to-point calls that took their copies along
            return res
        for w in (res if isinstance(res, (tuple, list)) else [res]):
            if isinstance(w, torch.ScriptObject):
                _c10d.Work.unbox(w).wait()  # done before the host copies are written back
        for t, h in scope.values():
            t.copy_(h)
        return res
    finally:
        _TL.scope = None

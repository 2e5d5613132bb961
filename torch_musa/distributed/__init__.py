"""torch_musa.distributed: the ``mccl`` collective backend for musa tensors.

``register()`` (called by ``import torch_musa``) makes
``torch.distributed.init_process_group("mccl")`` work, maps the ``musa`` device
to ``mccl`` (``device_id=torch.device("musa", i)``, ``"cpu:gloo,musa:mccl"``),
and adds ``torch.distributed.is_mccl_available()`` and ``torch.musa.mccl``
(``torch.musa.mccl.version()``).
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from torch_musa.distributed import mccl

__all__ = ["register", "is_mccl_available"]

_registered = False


def is_mccl_available() -> bool:
    """True when the ``mccl`` backend can be used (torch.distributed with Gloo present)."""
    return bool(dist.is_available() and dist.is_gloo_available())


def register() -> None:
    """Register ``mccl`` with torch.distributed and expose ``torch.musa.mccl`` (idempotent)."""
    global _registered
    if _registered:
        return
    musa_mod = getattr(torch, "musa", None) or sys.modules.get("torch_musa.core")
    if musa_mod is not None:
        musa_mod.mccl = mccl
    sys.modules.setdefault("torch.musa.mccl", mccl)
    if dist.is_available():
        dist.is_mccl_available = is_mccl_available
        if is_mccl_available():
            mccl.install()
    _registered = True

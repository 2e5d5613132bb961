"""muDNN's flags (the real torch_musa's ``torch_musa.core.mudnn``): ``set_flags`` and the
``flags`` context manager over ``torch.backends.mudnn.allow_tf32``, and ``version``."""
from __future__ import annotations

import contextlib

import torch

from torch_musa.config import CONFIG


def _backend():
    mod = getattr(torch.backends, "mudnn", None)
    if mod is None:
        raise RuntimeError("torch.backends.mudnn is not installed (import torch_musa first)")
    return mod


def version() -> int | None:
    """muDNN's version: cuDNN's under the cuda driver; None on the host driver, whose
    convolutions are the host's own kernels (as torch.backends.cudnn.version() is None
    without cuDNN)."""
    if CONFIG.driver == "cuda":
        return torch.backends.cudnn.version()
    return None


def set_flags(_allow_tf32: bool) -> tuple[bool]:
    """Set ``torch.backends.mudnn.allow_tf32``; returns the previous flags as a tuple."""
    mod = _backend()
    orig = (bool(mod.allow_tf32),)
    mod.allow_tf32 = bool(_allow_tf32)
    return orig


@contextlib.contextmanager
def flags(allow_tf32: bool = True):
    """Inside the block ``torch.backends.mudnn.allow_tf32`` is ``allow_tf32``; restored after."""
    orig = set_flags(allow_tf32)
    try:
        yield
    finally:
        set_flags(*orig)


__all__ = ["version", "set_flags", "flags"]

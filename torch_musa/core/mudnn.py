"""muDNN's flags (the real torch_musa's ``torch_musa.core.mudnn``): ``set_flags`` and the
``flags`` context manager over ``torch.backends.mudnn``'s switches, ``version`` and
``is_available``. ``torch.backends.mudnn`` carries the same four functions, as
``torch.backends.cudnn`` does."""
from __future__ import annotations

import contextlib

import torch

from torch_musa._driver import pick


def _backend():
    mod = getattr(torch.backends, "mudnn", None)
    if mod is None:
        raise RuntimeError("torch.backends.mudnn is not installed (import torch_musa first)")
    return mod


class _HostConvolutions:
    """The host driver's: its convolutions are the host's own kernels, no muDNN."""

    @staticmethod
    def version() -> int | None:
        return None

    @staticmethod
    def is_available() -> bool:
        return True


class _Cudnn:
    """The cuda driver's: cuDNN stands for muDNN."""

    @staticmethod
    def version() -> int | None:
        return torch.backends.cudnn.version()

    @staticmethod
    def is_available() -> bool:
        return torch.backends.cudnn.is_available()


_CONV_LIBRARY = pick(host=_HostConvolutions, cuda=_Cudnn)


def version() -> int | None:
    """muDNN's version: cuDNN's under the cuda driver; None on the host driver, whose
    convolutions are the host's own kernels (as torch.backends.cudnn.version() is None
    without cuDNN)."""
    return _CONV_LIBRARY.version()


def is_available() -> bool:
    """Whether musa's convolution switches apply: cuDNN's availability under the cuda driver;
    always on the host driver, which keeps the switches (its kernels are the host's own)."""
    return _CONV_LIBRARY.is_available()


def set_flags(_allow_tf32: bool) -> tuple[bool]:
    """Set ``torch.backends.mudnn.allow_tf32``; returns the previous flags as a tuple."""
    mod = _backend()
    orig = (bool(mod.allow_tf32),)
    mod.allow_tf32 = bool(_allow_tf32)
    return orig


@contextlib.contextmanager
def flags(allow_tf32: bool = True, *, enabled: bool | None = None, benchmark: bool | None = None,
          deterministic: bool | None = None):
    """Inside the block ``torch.backends.mudnn.allow_tf32`` is ``allow_tf32`` (the real
    torch_musa's one flag) and each of torch.backends.cudnn.flags' ``enabled``,
    ``benchmark`` and ``deterministic`` that is given; all are restored after."""
    mod = _backend()
    extra = {k: v for k, v in (("enabled", enabled), ("benchmark", benchmark),
                               ("deterministic", deterministic)) if v is not None}
    saved = {k: getattr(mod, k) for k in extra}
    orig = set_flags(allow_tf32)
    try:
        for k, v in extra.items():
            setattr(mod, k, v)
        yield
    finally:
        set_flags(*orig)
        for k, v in saved.items():
            setattr(mod, k, v)


__all__ = ["version", "is_available", "set_flags", "flags"]

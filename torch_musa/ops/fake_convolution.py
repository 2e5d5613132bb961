"""Convolution's fake (meta) outputs on musa take the memory format musa's kernel gives.

FakeTensor's rule for convolution asks ATen which backend the convolution would use
(``_select_conv_backend``) and that backend's output memory format. For a PrivateUse1
tensor ATen answers "Overrideable", whose format is contiguous; but on the host driver
musa's ``convolution_overrideable`` is the CPU's ``at::convolution``
(csrc/aten/native_kernels.cpp), which keeps channels-last. So a channels-last
convolution traced by ``torch.compile`` promised contiguous strides that eager did not
give: compiled musa returned another layout than eager musa and compiled CPU, and
Inductor's channels-last layout (the CPU's choice) failed its stride asserts.

The rule is asked with CPU stand-ins of the musa fakes (same sizes, strides, dtype),
and its outputs are moved back to musa. The cuda driver runs cuDNN, for which ATen's
answer for a PrivateUse1 tensor is not CUDA's either, but its graphs are traced on
CUDA fakes (torch_musa/_inductor/kernel_device.py); only the host driver installs this.
"""
from __future__ import annotations

import torch
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

from torch_musa._driver import pick

__all__ = ["install"]

_DEVICE = "musa"
_OPS = (
    torch.ops.aten.convolution.default,
    torch.ops.aten._convolution.default,
    torch.ops.aten._convolution.deprecated,
    torch.ops.aten.convolution_backward.default,
)
_stock: dict = {}


def _retarget(fake_mode, t, device: torch.device):
    """A fake of ``t``'s sizes, strides and dtype on ``device``."""
    with in_kernel_invocation_manager(fake_mode):
        meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return FakeTensor(fake_mode, meta, device)


def _as_on_the_kernel_device(fake_mode, func, *args, **kwargs):
    musa_device = None

    def to_cpu(x):
        nonlocal musa_device
        if isinstance(x, FakeTensor) and x.fake_device.type == _DEVICE:
            musa_device = x.fake_device
            return _retarget(fake_mode, x, torch.device("cpu"))
        return x

    cpu_args = [to_cpu(a) for a in args]
    cpu_kwargs = {k: to_cpu(v) for k, v in kwargs.items()}
    if musa_device is None:
        return _stock[func](fake_mode, func, *args, **kwargs)
    out = _stock[func](fake_mode, func, *cpu_args, **cpu_kwargs)

    def to_musa(x):
        return _retarget(fake_mode, x, musa_device) if isinstance(x, FakeTensor) else x

    return tuple(map(to_musa, out)) if isinstance(out, tuple) else to_musa(out)


def _install_host() -> None:
    for op in _OPS:
        # torch < 2.13 has no fake rule of its own for aten._convolution (it decomposes).
        if op not in _stock and op in fake_impls.op_implementations_dict:
            _stock[op] = fake_impls.op_implementations_dict[op]
            fake_impls.op_implementations_dict[op] = _as_on_the_kernel_device


def install() -> None:
    """Install the rule (host driver only; idempotent)."""
    pick(host=_install_host, cuda=lambda: None)()

"""Dtypes the CPU's kernels take and GPU kernels refuse: refused on musa as well.

CUDA has no uint8 bilinear or bicubic interpolation (``"..." not implemented for
'Byte'``), and PyTorch's own suite expects every accelerator to refuse it
(``test_nn.py``'s ``test_upsamplingBiMode2d_nonsupported_dtypes``). The host driver
runs the CPU's kernels, which take uint8, so code developed on the host driver
worked there and broke on a card. These kernels refuse what the cuda driver's
kernels refuse, with the same wording, then run the op as before. The functional
``upsample_bilinear2d``/``upsample_bicubic2d`` serve both drivers (through their
out= forms, musa's native kernels); the antialiased ones front ``half_upcast``'s
kernels on the host driver, and under the cuda driver CUDA's kernels refuse alone.
"""
from __future__ import annotations

import torch

from torch_musa.ops import half_upcast

#: aten op -> the dtypes GPU kernels lack for it (the CPU's have them).
REFUSED = {
    "upsample_bilinear2d": (torch.uint8,),
    "upsample_bicubic2d": (torch.uint8,),
    "_upsample_bilinear2d_aa": (torch.uint8,),
    "_upsample_bicubic2d_aa": (torch.uint8,),
}

_SCALAR_NAMES = {torch.uint8: "Byte"}


def _through_out(op: torch._ops.OpOverload):
    """The functional op as its out= form, which keeps musa's native kernel."""
    out_op = op.overloadpacket.out

    def run(self, *args, **kwargs):
        shape = op(self.to("meta"), *args, **kwargs)
        out = torch.empty_strided(shape.shape, shape.stride(), dtype=shape.dtype, device=self.device)
        return out_op(self, *args, **kwargs, out=out)

    return run


def kernel(name: str):
    """The op with its GPU dtype limit (musa_functions.yaml names this factory; ops/kernels.py
    registers it). Ops that half_upcast also serves keep its kernel behind the check."""
    op = getattr(torch.ops.aten, name).default
    run = half_upcast.kernel(name) if name in half_upcast.HALF_UPCAST_OPS else _through_out(op)
    refused = REFUSED[name]

    def checked(self, *args, **kwargs):
        if self.dtype in refused:
            raise RuntimeError(
                f'"{name}" not implemented for \'{_SCALAR_NAMES[self.dtype]}\' on musa, as on CUDA '
                f"(the CPU's kernel has it); convert the input to a floating-point dtype first")
        return run(self, *args, **kwargs)

    checked.__name__ = name
    return checked

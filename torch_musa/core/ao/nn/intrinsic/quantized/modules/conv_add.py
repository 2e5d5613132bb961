"""Quantized Conv2d + add + SiLU (``quantized::conv2d_add_silu``), as ``nniq.ConvAddReLU2d``
is for ReLU."""
from __future__ import annotations

import torch
import torch.ao.nn.quantized as nnq
import torch.nn.functional as F
from torch.ao.nn.quantized.modules.conv import _reverse_repeat_padding

from torch_musa.core.ao.nn.intrinsic import modules as nni

__all__ = ["ConvAddSiLU2d"]


class ConvAddSiLU2d(nnq.Conv2d):
    """``torch.ao.nn.quantized.Conv2d``'s interface; ``forward(input, extra_input)`` gives
    ``silu(conv(input) + extra_input)`` quantized with ``scale``/``zero_point``."""

    _FLOAT_MODULE = nni.ConvAddSiLU2d
    _NNI_CONV_ADD_MODULE = nni.ConvAddSiLU2d  # _ConvNd.from_float converts its conv ([0])

    def forward(self, input, extra_input):
        if input.dim() != 4:
            raise ValueError(f"Input shape must be `(N, C, H, W)`!, got {tuple(input.shape)}")
        if self.padding_mode != "zeros":
            input = F.pad(input, _reverse_repeat_padding(self.padding), mode=self.padding_mode)
        return torch.ops.quantized.conv2d_add_silu(input, extra_input, self._packed_params, self.scale,
                                                   self.zero_point)

    def _get_name(self):
        return "QuantizedConvAddSiLU2d"

    @classmethod
    def from_reference(cls, ref_qconv, output_scale, output_zero_point):
        return super().from_reference(ref_qconv[0], output_scale, output_zero_point)

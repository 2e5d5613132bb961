"""Quantized Conv2d + SiLU (``quantized::conv2d_silu``), as ``nniq.ConvReLU2d`` is for ReLU."""
from __future__ import annotations

import torch
import torch.ao.nn.quantized as nnq
import torch.nn.functional as F
from torch.ao.nn.quantized.modules.conv import _reverse_repeat_padding

from torch_musa.core.ao.nn.intrinsic import modules as nni
from torch_musa.core.ao.nn.intrinsic import qat as nniqat

__all__ = ["ConvSiLU2d"]


class ConvSiLU2d(nnq.Conv2d):
    """``torch.ao.nn.quantized.Conv2d``'s interface; the output is ``silu(conv)`` quantized with
    ``scale``/``zero_point``."""

    _FLOAT_MODULE = nni.ConvSiLU2d
    # _ConvNd.from_float: a float fused module listed here is converted from its conv ([0]),
    # a QAT ConvBn module named here has its BatchNorm folded first.
    _NNI_CONV_RELU_MODULE = nni.ConvSiLU2d
    _NNIQAT_CONV_BN_MODULE = nniqat.ConvBnSiLU2d

    def forward(self, input):
        if input.dim() != 4:
            raise ValueError(f"Input shape must be `(N, C, H, W)`!, got {tuple(input.shape)}")
        if self.padding_mode != "zeros":
            input = F.pad(input, _reverse_repeat_padding(self.padding), mode=self.padding_mode)
        return torch.ops.quantized.conv2d_silu(input, self._packed_params, self.scale, self.zero_point)

    def _get_name(self):
        return "QuantizedConvSiLU2d"

    @classmethod
    def from_reference(cls, ref_qconv, output_scale, output_zero_point):
        if type(ref_qconv) is nni.ConvBnSiLU2d:
            raise ValueError("BatchNorm2d should be fused into Conv2d before converting to a reference module")
        return super().from_reference(ref_qconv[0], output_scale, output_zero_point)

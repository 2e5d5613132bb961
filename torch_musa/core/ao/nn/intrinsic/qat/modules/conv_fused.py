"""Conv2d (+ BatchNorm2d) + SiLU with fake-quantized weights, for quantization-aware training:
``torch.ao.nn.intrinsic.qat.ConvBnReLU2d``/``ConvReLU2d`` with SiLU in place of ReLU."""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn
from torch.ao.nn import qat as nnqat
from torch.ao.nn.intrinsic import _FusedModule
from torch.ao.nn.intrinsic.qat import ConvBn2d

from torch_musa.core.ao.nn.intrinsic import modules as nni

__all__ = ["ConvBnSiLU2d", "ConvSiLU2d"]


class ConvBnSiLU2d(ConvBn2d):
    """Conv2d with BatchNorm2d folded in during training, then SiLU; ``to_float()`` gives a
    float ``ConvSiLU2d``."""

    _FLOAT_MODULE = nni.ConvBnSiLU2d
    _FLOAT_CONV_MODULE = nn.Conv2d
    _FLOAT_BN_MODULE = nn.BatchNorm2d
    _FLOAT_RELU_MODULE = nn.SiLU  # the activation slot of _ConvBnNd (to_float appends it)
    _FUSED_FLOAT_MODULE = nni.ConvSiLU2d

    def forward(self, input):
        return F.silu(self._forward(input))


class ConvSiLU2d(nnqat.Conv2d, _FusedModule):
    """Conv2d with fake-quantized weights, then SiLU."""

    _FLOAT_MODULE = nni.ConvSiLU2d
    _FLOAT_CONV_MODULE = nn.Conv2d
    _FLOAT_BN_MODULE = None
    _FLOAT_RELU_MODULE = nn.SiLU

    def forward(self, input):
        return F.silu(self._conv_forward(input, self.weight_fake_quant(self.weight), self.bias))

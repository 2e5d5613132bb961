"""Quantized fused modules."""
from torch_musa.core.ao.nn.intrinsic.quantized.modules.conv_add import ConvAddSiLU2d
from torch_musa.core.ao.nn.intrinsic.quantized.modules.conv_silu import ConvSiLU2d

__all__ = ["ConvAddSiLU2d", "ConvSiLU2d"]

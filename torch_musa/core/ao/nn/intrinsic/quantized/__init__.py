"""Quantized fused modules, as ``torch.ao.nn.intrinsic.quantized``'s."""
from torch_musa.core.ao.nn.intrinsic.quantized.modules import ConvAddSiLU2d, ConvSiLU2d

__all__ = ["ConvAddSiLU2d", "ConvSiLU2d"]

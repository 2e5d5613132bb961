"""Quantization-aware-training fused modules."""
from torch_musa.core.ao.nn.intrinsic.qat.modules.conv_fused import ConvBnSiLU2d, ConvSiLU2d

__all__ = ["ConvBnSiLU2d", "ConvSiLU2d"]

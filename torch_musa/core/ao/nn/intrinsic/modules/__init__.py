"""Float fused modules."""
from torch_musa.core.ao.nn.intrinsic.modules.fused import ConvAddSiLU2d, ConvBnSiLU2d, ConvSiLU2d

__all__ = ["ConvAddSiLU2d", "ConvBnSiLU2d", "ConvSiLU2d"]

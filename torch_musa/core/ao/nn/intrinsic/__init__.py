"""Float fused modules (containers that quantization replaces), as ``torch.ao.nn.intrinsic``'s."""
from torch_musa.core.ao.nn.intrinsic.modules import ConvAddSiLU2d, ConvBnSiLU2d, ConvSiLU2d

__all__ = ["ConvAddSiLU2d", "ConvBnSiLU2d", "ConvSiLU2d"]

"""Quantization-aware-training fused modules, as ``torch.ao.nn.intrinsic.qat``'s."""
from torch_musa.core.ao.nn.intrinsic.qat.modules import ConvBnSiLU2d, ConvSiLU2d

__all__ = ["ConvBnSiLU2d", "ConvSiLU2d"]

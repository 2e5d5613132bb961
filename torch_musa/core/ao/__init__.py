"""``torch_musa.core.ao``: the real torch_musa's fused modules for quantization (SiLU fusions).

``register_helper._register_ao_intrinsic_modules()`` (run at import) puts them where the
real package does: ``torch.ao.nn.intrinsic{,.qat,.quantized}.ConvSiLU2d`` and friends.
"""
from torch_musa.core.ao import nn

__all__ = ["nn"]

"""Puts the SiLU fusions where the real torch_musa puts them, beside PyTorch's ReLU ones."""
from __future__ import annotations

import torch.ao.nn.intrinsic
import torch.ao.nn.intrinsic.qat
import torch.ao.nn.intrinsic.quantized
import torch.ao.nn.quantized.reference as nnqr

from torch_musa._post_import import when_imported

from torch_musa.core.ao.nn.intrinsic import modules as nni
from torch_musa.core.ao.nn.intrinsic import qat as nniqat
from torch_musa.core.ao.nn.intrinsic import quantized as nniq

__all__ = ["_register_ao_intrinsic_modules"]

_PLACES = (
    (torch.ao.nn.intrinsic, nni, ("ConvBnSiLU2d", "ConvSiLU2d", "ConvAddSiLU2d")),
    (torch.ao.nn.intrinsic.qat, nniqat, ("ConvBnSiLU2d", "ConvSiLU2d")),
    (torch.ao.nn.intrinsic.quantized, nniq, ("ConvSiLU2d", "ConvAddSiLU2d")),
)


def _register_ao_intrinsic_modules() -> None:
    """``torch.ao.nn.intrinsic{,.qat,.quantized}.<name>`` for each of this package's modules, and
    FX's lowering of a reference ConvSiLU2d to the quantized one (the real package patches
    ``_lower_to_native_backend.py`` for it)."""
    for target, source, names in _PLACES:
        for name in names:
            setattr(target, name, getattr(source, name))
    when_imported(_FX_LOWERING, _lower_conv_silu,  # FX costs ~40 ms to import: not before it is used
                  failure="convert_fx leaves a reference ConvSiLU2d unlowered")


_FX_LOWERING = "torch.ao.quantization.fx._lower_to_native_backend"


def _lower_conv_silu(module) -> None:
    module.STATIC_LOWER_FUSED_MODULE_MAP[nni.ConvSiLU2d] = (nnqr.Conv2d, nniq.ConvSiLU2d)

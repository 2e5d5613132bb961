"""Puts the SiLU fusions where the real torch_musa puts them, beside PyTorch's ReLU ones."""
from __future__ import annotations

import torch.ao.nn.intrinsic
import torch.ao.nn.intrinsic.qat
import torch.ao.nn.intrinsic.quantized

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
    """``torch.ao.nn.intrinsic{,.qat,.quantized}.<name>`` for each of this package's modules."""
    for target, source, names in _PLACES:
        for name in names:
            setattr(target, name, getattr(source, name))

"""Conv2d fused with SiLU (and BatchNorm2d, or an addition): what ``fuse_modules`` produces
and quantization replaces, as ``torch.ao.nn.intrinsic.ConvReLU2d`` and friends do for ReLU."""
from __future__ import annotations

from torch import nn
from torch.ao.nn.intrinsic import _FusedModule
from torch.nn.utils.parametrize import type_before_parametrizations

__all__ = ["ConvAddSiLU2d", "ConvBnSiLU2d", "ConvSiLU2d"]


def _check_types(modules: tuple[nn.Module, ...], expected: tuple[type, ...]) -> None:
    got = tuple(type_before_parametrizations(m) for m in modules)
    if got != expected:
        raise TypeError(f"expected modules of types {[t.__name__ for t in expected]}, "
                        f"got {[t.__name__ for t in got]}")


class ConvSiLU2d(_FusedModule):
    """Conv2d then SiLU."""

    def __init__(self, conv, silu):
        _check_types((conv, silu), (nn.Conv2d, nn.SiLU))
        super().__init__(conv, silu)


class ConvBnSiLU2d(_FusedModule):
    """Conv2d, BatchNorm2d, then SiLU."""

    def __init__(self, conv, bn, silu):
        _check_types((conv, bn, silu), (nn.Conv2d, nn.BatchNorm2d, nn.SiLU))
        super().__init__(conv, bn, silu)


class ConvAddSiLU2d(_FusedModule):
    """``silu(add(conv(x1), x2))``: Conv2d, an addition module, then SiLU."""

    def __init__(self, conv, add, silu):
        super().__init__(conv)
        self.add = add
        self.silu = silu

    def forward(self, x1, x2):
        return self.silu(self.add(self[0](x1), x2))

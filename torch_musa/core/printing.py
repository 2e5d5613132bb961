"""print(tensor) for musa tensors whose dtype the hardware profile lacks.

PyTorch's formatter computes on the tensor's own device, in float64 for
non-MPS devices. On a profile without float64 (or bfloat16) that would raise,
so such tensors are formatted from a host copy instead.
"""
from __future__ import annotations

import torch
import torch._tensor_str as _ts

from torch_musa.config import CONFIG


def install() -> None:
    unsupported = set(CONFIG.profile.unsupported_dtypes())
    if not unsupported:
        return
    fp64_missing = torch.float64 in unsupported
    original_totype = _ts.tensor_totype
    original_tensor_str = _ts._tensor_str

    def tensor_totype(t):
        if fp64_missing and t.device.type == "musa":
            return t.to(dtype=torch.float)
        return original_totype(t)

    def _tensor_str(self, indent):
        if self.device.type == "musa" and self.dtype in unsupported:
            self = self.cpu()
        return original_tensor_str(self, indent)

    _ts.tensor_totype = tensor_totype
    _ts._tensor_str = _tensor_str

"""Legacy type names (torch.musa.FloatTensor, ...), as torch.cuda has them."""
from __future__ import annotations

import torch

_TYPES = {
    "DoubleTensor": torch.float64, "FloatTensor": torch.float32,
    "HalfTensor": torch.float16, "BFloat16Tensor": torch.bfloat16,
    "LongTensor": torch.int64, "IntTensor": torch.int32, "ShortTensor": torch.int16,
    "CharTensor": torch.int8, "ByteTensor": torch.uint8, "BoolTensor": torch.bool,
}


class _LegacyTensorType(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Tensor) and obj.device.type == "musa" and obj.dtype == cls.dtype

    def __call__(cls, *args, **kwargs):
        """Uninitialised by sizes, or from data, on the current musa device."""
        device = kwargs.pop("device", "musa")
        if len(args) == 1 and not isinstance(args[0], int):
            return torch.tensor(args[0], dtype=cls.dtype, device=device)
        return torch.empty(*args, dtype=cls.dtype, device=device, **kwargs)


def make_types() -> dict[str, type]:
    return {name: _LegacyTensorType(name, (), {"dtype": dtype, "is_musa": True})
            for name, dtype in _TYPES.items()}

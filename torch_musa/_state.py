"""What the runtime was configured with at import (read-only afterwards)."""
from __future__ import annotations

import os

import torch

from torch_musa import _C
from torch_musa.core import env
from torch_musa.core.profiles import selected_profile

profile = selected_profile()
physical_indices = env.visible_devices(profile.num_devices)
device_count = len(physical_indices)
_override = os.environ.get("TORCH_MUSA_DEVICE_MEMORY")
capacity_bytes = (
    env.parse_bytes(_override, "TORCH_MUSA_DEVICE_MEMORY") if _override else profile.total_memory
)
host_limit_bytes = env.host_memory_limit()


def configure_runtime() -> None:
    _C._configure(
        device_count,
        profile.name,
        capacity_bytes,
        host_limit_bytes,
        profile.clock_rate_khz * 1e3,
        [int(_scalar_type_index(d)) for d in profile.unsupported_dtypes()],
    )
    max_split, gc = env.allocator_settings()
    _C._set_allocator_settings(max_split, gc)


def _scalar_type_index(dtype: torch.dtype) -> int:
    # c10::ScalarType numbering, which torch exposes through the dtype's
    # position in this table.
    order = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
             torch.float16, torch.float32, torch.float64, torch.complex32,
             torch.complex64, torch.complex128, torch.bool, torch.qint8,
             torch.quint8, torch.qint32, torch.bfloat16]
    return order.index(dtype)

"""What the runtime was configured with at import (read-only afterwards)."""
from __future__ import annotations

import os

import torch

from torch_musa import _C
from torch_musa.core import env
from torch_musa.core.profiles import selected_profile

driver = env.driver_name()
if driver == "cuda":
    # Before CUDA starts: the GPUs it sees and its allocator's settings are musa's.
    os.environ.update(env.cuda_driver_env(os.environ))
    if not _C._cuda_driver_built():
        raise RuntimeError(
            "TORCH_MUSA_DRIVER=cuda, but this torch_musa was built without CUDA "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda}). Reinstall it "
            "where torch has CUDA and a CUDA toolkit is present, or unset "
            "TORCH_MUSA_DRIVER for the host driver."
        )
    if not torch.cuda.is_available():
        raise RuntimeError("TORCH_MUSA_DRIVER=cuda needs a CUDA GPU, but torch.cuda "
                           "sees none; unset TORCH_MUSA_DRIVER for the host driver.")
profile = selected_profile(driver)
physical_indices = (
    list(range(profile.num_devices)) if driver == "cuda"
    else env.visible_devices(profile.num_devices)
)
device_count = len(physical_indices)
_override = os.environ.get("TORCH_MUSA_DEVICE_MEMORY")
capacity_bytes = (
    env.parse_bytes(_override, "TORCH_MUSA_DEVICE_MEMORY") if _override else profile.total_memory
)
host_limit_bytes = env.host_memory_limit()


def configure_runtime() -> None:
    _C._use_driver(driver)
    _C._configure(
        device_count,
        profile.name,
        capacity_bytes,
        host_limit_bytes,
        profile.clock_rate_khz * 1e3,
        [int(_scalar_type_index(d)) for d in profile.unsupported_dtypes()],
    )
    if driver != "cuda":  # the cuda driver's allocator is CUDA's, configured through its variable
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

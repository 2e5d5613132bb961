"""Simulated hardware profiles: what each modeled MUSA card reports and allows.

Chosen with ``TORCH_MUSA_PROFILE`` (a key below, case-insensitive). The runtime
enforces capacity and dtype support, and ``torch.musa.get_device_properties``
reports the rest.
"""
from __future__ import annotations

import dataclasses
import functools
import os

import torch

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class HardwareProfile:
    key: str
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    clock_rate_khz: int
    num_devices: int
    supports_bf16: bool
    supports_fp64: bool

    @property
    def arch(self) -> int:
        """The arch number torch_musa uses (e.g. 22 for MUSA arch 2.2)."""
        return self.major * 10 + self.minor

    def unsupported_dtypes(self) -> list[torch.dtype]:
        out = []
        if not self.supports_bf16:
            out += [torch.bfloat16]
        if not self.supports_fp64:
            out += [torch.float64, torch.complex128]
        return out


PROFILES = {
    p.key: p
    for p in (
        HardwareProfile("s80", "MTT S80", 2, 1, 16 * GiB, 32, 1_800_000, 2, False, False),
        HardwareProfile("s4000", "MTT S4000", 2, 2, 48 * GiB, 128, 1_500_000, 2, True, False),
        HardwareProfile("s5000", "MTT S5000", 3, 1, 80 * GiB, 128, 1_600_000, 2, True, True),
    )
}
DEFAULT_PROFILE = "s4000"


@functools.lru_cache(maxsize=None)
def gpu_profile() -> HardwareProfile:
    """What the cuda driver's musa device reports: the GPU underneath.

    Cached: on CUDA 13 builds ``props.clock_rate`` is a cudaDeviceGetAttribute call
    of ~0.7 ms, which made every bf16 autocast op pay it (GPT-2 step 1.19x native).
    """
    props = torch.cuda.get_device_properties(0)
    return HardwareProfile(
        "cuda",
        f"{props.name} (cuda driver)",
        props.major,
        props.minor,
        props.total_memory,
        props.multi_processor_count,
        int(getattr(props, "clock_rate", 0) or 1_980_000),
        torch.cuda.device_count(),
        True,
        True,
    )


def selected_profile(driver: str | None = None) -> HardwareProfile:
    if driver is None:
        from torch_musa.core.env import driver_name

        driver = driver_name()
    if driver == "cuda":
        return gpu_profile()
    key = os.environ.get("TORCH_MUSA_PROFILE", DEFAULT_PROFILE).strip().lower()
    key = key.replace("mtt", "").replace(" ", "").replace("_", "")
    if key not in PROFILES:
        raise ValueError(
            f"TORCH_MUSA_PROFILE={os.environ.get('TORCH_MUSA_PROFILE')!r} is not a "
            f"known hardware profile; choose one of {sorted(PROFILES)}"
        )
    return PROFILES[key]

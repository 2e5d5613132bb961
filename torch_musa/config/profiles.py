"""Simulated hardware profiles: what each modeled MUSA card reports and allows.

Chosen with ``TORCH_MUSA_PROFILE`` (a key below; see ``profile_key``). The
runtime enforces capacity and dtype support, and
``torch.musa.get_device_properties`` reports the rest.
"""
from __future__ import annotations

import dataclasses

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
    # The rest of what CUDA device properties carry and PyTorch reads (inductor's
    # heuristics, the profiler's trace, torch.cuda._device_limits): modeled values,
    # in CUDA's units (bytes, kHz, bits).
    memory_clock_rate_khz: int = 8_000_000
    memory_bus_width: int = 384
    l2_cache_size: int = 8 << 20
    warp_size: int = 32
    max_threads_per_block: int = 1024
    max_threads_per_multi_processor: int = 2048
    regs_per_multiprocessor: int = 64 << 10
    shared_memory_per_block: int = 48 << 10
    shared_memory_per_block_optin: int = 64 << 10
    shared_memory_per_multiprocessor: int = 64 << 10

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
        # GDDR6: 256 bits at 14 Gb/s (448 GB/s).
        HardwareProfile("s80", "MTT S80", 2, 1, 16 * GiB, 32, 1_800_000, 2, False, False,
                        memory_clock_rate_khz=7_000_000, memory_bus_width=256),
        # GDDR6: 384 bits at 16 Gb/s (768 GB/s).
        HardwareProfile("s4000", "MTT S4000", 2, 2, 48 * GiB, 128, 1_500_000, 2, True, True),
        # HBM-class: 5120 bits at 3.2 Gb/s (2 TB/s); a newer arch's larger on-chip memories.
        HardwareProfile("s5000", "MTT S5000", 3, 1, 80 * GiB, 128, 1_600_000, 2, True, True,
                        memory_clock_rate_khz=1_600_000, memory_bus_width=5120,
                        l2_cache_size=32 << 20, shared_memory_per_block_optin=160 << 10,
                        shared_memory_per_multiprocessor=192 << 10),
    )
}
DEFAULT_PROFILE = "s4000"

#: torch.cuda's own, taken when the configuration loads: cuda_compat later puts
#: musa's in its place, and musa's properties read the GPU's through this one.
cuda_device_properties = torch.cuda.get_device_properties


def gpu_profile() -> HardwareProfile:
    """What the cuda driver's musa device reports: the GPU underneath.

    Called once, by the runtime configuration: on CUDA 13 builds ``props.clock_rate``
    is a cudaDeviceGetAttribute call of ~0.7 ms, which every bf16 autocast op paid
    while the profile was looked up per call (GPT-2 step 1.19x native).
    """
    props = cuda_device_properties(0)
    extra = {}
    for ours, cuda_name in _CUDA_PROPERTY_NAMES.items():
        value = getattr(props, cuda_name, None)
        if value:
            extra[ours] = int(value)
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
        **extra,
    )


# Profile field -> the CUDA device property that gives it under the cuda driver.
_CUDA_PROPERTY_NAMES = {
    "memory_clock_rate_khz": "memory_clock_rate",
    "memory_bus_width": "memory_bus_width",
    "l2_cache_size": "L2_cache_size",
    "warp_size": "warp_size",
    "max_threads_per_block": "max_threads_per_block",
    "max_threads_per_multi_processor": "max_threads_per_multi_processor",
    "regs_per_multiprocessor": "regs_per_multiprocessor",
    "shared_memory_per_block": "shared_memory_per_block",
    "shared_memory_per_block_optin": "shared_memory_per_block_optin",
    "shared_memory_per_multiprocessor": "shared_memory_per_multiprocessor",
}


def profile_key(text: str) -> str | None:
    """The PROFILES key ``text`` names ("s80", "S4000", "MTT S5000", "mtt_s5000"), or None."""
    key = text.strip().lower().replace("mtt", "").replace(" ", "").replace("_", "")
    return key if key in PROFILES else None

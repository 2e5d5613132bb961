"""Devices: selection, count, properties (from the hardware profile)."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from torch_musa import _C
from torch_musa.core import _lazy

_device_t = torch.device | str | int | None


def _get_device_index(device: _device_t, optional: bool = False) -> int:
    """The musa index that ``device`` names; the current one for None/'musa'."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "musa":
            raise ValueError(f"Expected a musa device, but got: {device}")
        device = device.index
    if device is None:
        if not optional:
            raise ValueError("Expected a musa device with a specified index or an integer, but got None")
        return current_device()
    if not isinstance(device, int):
        raise TypeError(f"Expected a musa device, index or string, got {type(device).__name__}")
    _C._check_device(device)
    return device


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    from torch_musa import _state
    return _state.device_count


def current_device() -> int:
    _lazy._lazy_init()
    return _C._get_device()


def set_device(device: _device_t) -> None:
    idx = _get_device_index(device, optional=True)
    _lazy._lazy_init()
    _C._set_device(idx)


class device:
    """Context manager that changes the current musa device."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx != -1:
            _lazy._lazy_init()
            self.prev_idx = _C._get_device()
            if self.prev_idx != self.idx:
                _C._set_device(self.idx)

    def __exit__(self, *exc) -> bool:
        if self.idx != -1 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of ``obj`` (a tensor) current."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "musa" else None)


def synchronize(device: _device_t = None) -> None:
    """Wait for all work queued on every stream of ``device``."""
    _lazy._lazy_init()
    idx = _get_device_index(device, optional=True)
    torch.accelerator.synchronize(idx)


@dataclasses.dataclass(frozen=True)
class _MusaDeviceProperties:
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    clock_rate: int
    is_integrated: bool
    is_multi_gpu_board: bool
    L2_cache_size: int
    uuid: str
    warp_size: int = 32
    max_threads_per_multi_processor: int = 2048

    def __repr__(self) -> str:
        return (
            f"_MusaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1 << 20)}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
            f"L2_cache_size={self.L2_cache_size // (1 << 20)}MB)"
        )


def get_device_properties(device: _device_t = None) -> _MusaDeviceProperties:
    idx = _get_device_index(device, optional=True)
    from torch_musa import _state
    p = _state.profile
    physical = _state.physical_indices[idx]
    return _MusaDeviceProperties(
        name=p.name,
        major=p.major,
        minor=p.minor,
        total_memory=_state.capacity_bytes,
        multi_processor_count=p.multi_processor_count,
        clock_rate=p.clock_rate_khz,
        is_integrated=False,
        is_multi_gpu_board=False,
        L2_cache_size=8 << 20,
        uuid=f"4d555341-{p.key:0>4.4}-4000-8000-{physical:012x}",
    )


def get_device_name(device: _device_t = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _device_t = None) -> tuple[int, int]:
    p = get_device_properties(device)
    return p.major, p.minor


def get_arch_list() -> list[str]:
    """Architectures this build serves (the host driver serves them all)."""
    if not is_available():
        return []
    from torch_musa.core.profiles import PROFILES
    return sorted({f"mp_{p.arch}" for p in PROFILES.values()})


def is_bf16_supported(including_emulation: bool = True) -> bool:
    from torch_musa import _state

    return is_available() and _state.profile.supports_bf16


def can_device_access_peer(device: _device_t, peer_device: _device_t) -> bool:
    """Peers on one host driver share host RAM, so any two distinct devices can."""
    a = _get_device_index(device, optional=True)
    b = _get_device_index(peer_device, optional=True)
    return a != b

"""Dynamo's runtime interface for the musa device (``torch._dynamo.device_interface``).

Dynamo and Inductor reach a device's runtime through this class (current device,
streams, synchronize, properties, dtype support); every answer comes from
``torch.musa``.
"""
from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from torch_musa.config import CONFIG

__all__ = ["MusaInterface", "register"]


class MusaInterface(DeviceInterface):
    """``torch.musa`` as dynamo asks for it."""

    device = torch.musa.device
    Event = torch.musa.Event
    Stream = torch.musa.Stream

    class Worker:
        """What compile workers may ask without touching the runtime; answered from
        the configuration (the hardware profile), which every process reads alike."""

        @staticmethod
        def set_device(device: int) -> None:
            torch.musa.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.musa.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            return torch.musa.get_device_properties(device)

    current_device = staticmethod(lambda: torch.musa.current_device())
    set_device = staticmethod(lambda device: torch.musa.set_device(device))
    device_count = staticmethod(lambda: torch.musa.device_count())
    is_available = staticmethod(lambda: torch.musa.is_available())
    stream = staticmethod(lambda stream: torch.musa.stream(stream))
    current_stream = staticmethod(lambda: torch.musa.current_stream())
    set_stream = staticmethod(lambda stream: torch.musa.set_stream(stream))
    synchronize = staticmethod(lambda device=None: torch.musa.synchronize(device))
    memory_allocated = staticmethod(lambda device=None: torch.musa.memory_allocated(device))

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        prev = torch.musa.current_device()
        if device >= 0 and device != prev:
            torch.musa.set_device(device)
        return prev

    exchange_device = maybe_exchange_device

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.musa.set_stream(torch.musa.Stream(stream_id=stream_id, device_index=device_index,
                                                device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return torch.musa.current_stream(device_idx).musa_stream

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> int:
        major, minor = torch.musa.get_device_capability(device)
        return major * 10 + minor

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return CONFIG.profile.supports_bf16

    @classmethod
    def is_dtype_supported(cls, dtype: torch.dtype, including_emulation: bool = False) -> bool:
        if dtype in (torch.float64, torch.complex128) and CONFIG.double_cast:
            return True
        return dtype not in CONFIG.profile.unsupported_dtypes()

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False


def register() -> None:
    register_interface_for_device("musa", MusaInterface)
    for i in range(torch.musa.device_count()):
        register_interface_for_device(f"musa:{i}", MusaInterface)

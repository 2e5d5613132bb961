"""Device monitoring (torch.cuda.utilization, temperature, power_draw, ...).

torch.cuda asks the GPU's management library (pynvml) for these. Under the
cuda driver, musa asks the same for the GPU underneath (the same errors when
pynvml is missing). The host driver has no sensors: what it knows it reports
(the modeled card's clock, the memory this process holds, the only process on
its devices); the sensor readings raise :class:`NotAvailableError`, naming the
driver that can answer, rather than a made-up number.
"""
from __future__ import annotations

from typing import Any

import torch

from torch_musa._driver import pick
from torch_musa.config import CONFIG
from torch_musa.core.device import _get_device_index
from torch_musa.core.memory import list_gpu_processes, memory_reserved  # noqa: F401  (re-exported)

_cuda = {name: getattr(torch.cuda, name) for name in (
    "utilization", "memory_usage", "temperature", "power_draw", "clock_rate",
    "device_memory_used") if hasattr(torch.cuda, name)}


class NotAvailableError(RuntimeError):
    """A reading the host driver cannot take (it has no hardware sensors)."""


def _index(device: Any) -> int:
    return _get_device_index(device, optional=True)


def _host_only(what: str) -> NotAvailableError:
    return NotAvailableError(
        f"torch.musa.{what} is not available on the host driver: it has no hardware sensors "
        "(run under TORCH_MUSA_DRIVER=cuda, where the GPU's management library answers)")


def _gpu(name: str, device: Any):
    return _cuda[name](CONFIG.physical_indices[_index(device)])


class _HostMonitor:
    """The host driver's: no sensors; what it knows it reports."""

    @staticmethod
    def sensor(name: str, device: Any) -> int:
        _index(device)
        raise _host_only(name)

    @staticmethod
    def clock_rate(device: Any) -> int:
        _index(device)
        return CONFIG.profile.clock_rate_khz // 1000

    @staticmethod
    def device_memory_used(device: Any) -> int:
        return memory_reserved(_index(device))


class _GpuMonitor:
    """The cuda driver's: the GPU's management library answers, as for torch.cuda."""

    @staticmethod
    def sensor(name: str, device: Any) -> int:
        return _gpu(name, device)

    @staticmethod
    def clock_rate(device: Any) -> int:
        return _gpu("clock_rate", device)

    @staticmethod
    def device_memory_used(device: Any) -> int:
        return _gpu("device_memory_used", device)


_MONITOR = pick(host=_HostMonitor, cuda=_GpuMonitor)


def _gpu_reading(name: str, device: Any) -> int:
    """A reading only the GPU (the cuda driver's NVML) takes; the host driver says so."""
    return _MONITOR.sensor(name, device)


def utilization(device: Any = None) -> int:
    """Percent of the last sample period during which a kernel ran on the device."""
    return _gpu_reading("utilization", device)


def memory_usage(device: Any = None) -> int:
    """Percent of the last sample period during which device memory was read or written."""
    return _gpu_reading("memory_usage", device)


def temperature(device: Any = None) -> int:
    """The device's temperature in degrees Celsius."""
    return _gpu_reading("temperature", device)


def power_draw(device: Any = None) -> int:
    """The device's power draw in milliwatts."""
    return _gpu_reading("power_draw", device)


def clock_rate(device: Any = None) -> int:
    """The device's compute clock in MHz: the GPU's, or the modeled card's on the host driver."""
    return _MONITOR.clock_rate(device)


def device_memory_used(device: Any = None) -> int:
    """Bytes of device memory in use by every process. A host driver device belongs to
    this process alone, so that is what its caching allocator holds."""
    return _MONITOR.device_memory_used(device)


__all__ = ["utilization", "memory_usage", "temperature", "power_draw", "clock_rate",
           "device_memory_used", "list_gpu_processes", "NotAvailableError"]

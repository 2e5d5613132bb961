"""Device memory: statistics, caching, limits (the runtime's caching allocator)."""
from __future__ import annotations

import collections
from typing import Any

import torch

from torch_musa import _C
from torch_musa.config import CONFIG
from torch_musa.core import _lazy
from torch_musa.core.device import _get_device_index

OutOfMemoryError = torch.OutOfMemoryError


def empty_cache() -> None:
    """Return cached, unused blocks to the driver (they stop counting as reserved)."""
    torch._C._accelerator_emptyCache()


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    idx = _get_device_index(device, optional=True)
    return torch._C._accelerator_getDeviceStats(idx)


def memory_stats(device: Any = None) -> collections.OrderedDict[str, Any]:
    """Flat ``"allocated_bytes.all.current"``-style statistics, as torch.cuda.memory_stats."""
    out: list[tuple[str, Any]] = []

    def flatten(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                flatten(f"{prefix}.{k}" if prefix else k, v)
        else:
            out.append((prefix, obj))

    flatten("", memory_stats_as_nested_dict(device))
    out.sort()
    return collections.OrderedDict(out)


def _stat(device: Any, name: str, kind: str) -> int:
    return memory_stats_as_nested_dict(device)[name]["all"][kind]


def memory_allocated(device: Any = None) -> int:
    return _stat(device, "allocated_bytes", "current")


def max_memory_allocated(device: Any = None) -> int:
    return _stat(device, "allocated_bytes", "peak")


def memory_reserved(device: Any = None) -> int:
    return _stat(device, "reserved_bytes", "current")


def max_memory_reserved(device: Any = None) -> int:
    return _stat(device, "reserved_bytes", "peak")


def memory_cached(device: Any = None) -> int:
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    return max_memory_reserved(device)


def reset_peak_memory_stats(device: Any = None) -> None:
    torch._C._accelerator_resetPeakStats(_get_device_index(device, optional=True))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch._C._accelerator_resetAccumulatedStats(_get_device_index(device, optional=True))


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device; cached blocks count as used, as on CUDA."""
    return tuple(torch._C._accelerator_getMemoryInfo(_get_device_index(device, optional=True)))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Cap this process at ``fraction`` of the device's capacity."""
    idx = _get_device_index(device, optional=True)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    _lazy._lazy_init()
    _C._set_memory_fraction(fraction, idx)


def memory_snapshot() -> list[dict[str, Any]]:
    """Every segment the allocator holds, with its blocks."""
    if CONFIG.driver == "cuda":  # musa memory is CUDA's caching allocator there (musa:i is cuda:i)
        return torch.cuda.memory_snapshot()
    return _C._memory_snapshot()


def _format_size(n: int) -> str:
    for unit in ("B ", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:6d} {unit}" if unit == "B " else f"{n:6.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A human-readable table of the allocator statistics."""
    idx = _get_device_index(device, optional=True)
    stats = memory_stats_as_nested_dict(idx)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocs", "active", False),
        ("Device reserved segments", "segment", False),
    ]
    line = "=" * 75
    out = [line, f" PyTorch MUSA memory summary, device ID {idx:<29d}",
           "-" * 75, f" {'Metric':<27}| {'Cur Usage':>10} | {'Peak Usage':>10} | {'Tot Alloc':>10} | {'Tot Freed':>10}",
           "-" * 75]
    pools = ["all"] if abbreviated else ["all", "large_pool", "small_pool"]
    for title, key, is_bytes in rows:
        for pool in pools:
            s = stats[key][pool]
            fmt = _format_size if is_bytes else (lambda v: f"{v:10d}")
            label = title if pool == "all" else f"      from {pool.replace('_', ' ')}"
            out.append(f" {label:<27}| {fmt(s['current']):>10} | {fmt(s['peak']):>10} | "
                       f"{fmt(s['allocated']):>10} | {fmt(s['freed']):>10}")
        out.append("-" * 75)
    out.append(f" Allocation retries: {stats['num_alloc_retries']}   OOMs: {stats['num_ooms']}   "
               f"Device allocs: {stats['num_device_alloc']}   Device frees: {stats['num_device_free']}")
    out.append(line)
    return "\n".join(out) + "\n"

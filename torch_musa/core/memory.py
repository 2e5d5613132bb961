"""Device memory: statistics, caching, limits (the runtime's caching allocator)."""
from __future__ import annotations

import collections
import contextlib
import ctypes
import inspect
import os
import pickle
import sys
import threading
from typing import Any

import torch
from torch.cuda import _memory_viz

from torch_musa import _C
from torch_musa._driver import pick
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
    if not 0 <= fraction <= 1:  # torch.cuda's check and words (a ValueError, before the allocator)
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _lazy._lazy_init()
    _C._set_memory_fraction(fraction, idx)


def get_per_process_memory_fraction(device: Any = None) -> float:
    """The fraction of the device's memory this process may use (set_per_process_memory_fraction)."""
    _lazy._lazy_init()
    idx = _get_device_index(device, optional=True)
    return _ALLOCATOR.memory_fraction(idx)


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """Pinned host memory statistics, nested ({"allocations": {"current": ...}, ...}).

    Counted from the process's first pinned block: ``pin_memory()`` and ``pin_memory=True``
    allocate through the hooks' pinned allocator (core/PinnedAllocator.cpp) without the lazy
    musa initialisation, so the counters are read whether or not musa is initialised (an
    empty dict before initialisation hid blocks pinned before the first musa call)."""
    out: dict[str, Any] = {}
    for key, value in _C._host_memory_stats().items():
        name, _, kind = key.partition(".")
        number = value if name.endswith("_time") and kind not in ("count",) else int(value)
        if kind:
            out.setdefault(name, {})[kind] = number
        else:
            out[name] = number
    return out


def host_memory_stats() -> dict[str, Any]:
    """Pinned (host) allocator statistics with torch.cuda.host_memory_stats' flat keys:
    ``allocations.*``, ``allocated_bytes.*``, ``active_requests.*``, ``active_bytes.*``
    ({current, peak, allocated, freed}), ``num_host_alloc``/``num_host_free`` and
    ``host_alloc_time.*``/``host_free_time.*`` (microseconds)."""
    flat: list[tuple[str, Any]] = []
    for name, value in host_memory_stats_as_nested_dict().items():
        if isinstance(value, dict):
            flat += [(f"{name}.{k}", v) for k, v in value.items()]
        else:
            flat.append((name, value))
    return collections.OrderedDict(sorted(flat))


def reset_accumulated_host_memory_stats() -> None:
    """Restart the ``allocated``/``freed`` totals and the timings from zero."""
    _C._reset_host_memory_stats(False)


def reset_peak_host_memory_stats() -> None:
    """Set every ``peak`` to its ``current`` value."""
    _C._reset_host_memory_stats(True)


def list_gpu_processes(device: Any = None) -> str:
    """The processes using the device and their memory, in torch.cuda's format. On the
    host driver the only one is this process, once it has initialised musa."""
    return _ALLOCATOR.list_gpu_processes(_get_device_index(device, optional=True))


def _scaled(value: int, scale_by: float, units: tuple[str, ...], step: int, limit: float) -> tuple[int, str]:
    """``value`` in the largest unit below which ``scale_by`` (the row's first value) stays under
    ``limit``: torch.cuda's summary scales a row's pools by its total, so they share a unit."""
    unit = units[0]
    for bigger in units[1:]:
        if scale_by < limit:
            break
        value, scale_by, unit = value // step, scale_by / step, bigger
    return value, unit


def _summary_size(value: int, scale_by: int) -> str:
    n, unit = _scaled(value, scale_by, ("B  ", "KiB", "MiB", "GiB", "TiB", "PiB"), 1024, 768 * 1024)
    return f"{n:6d} {unit}"


def _summary_count(value: int, scale_by: int) -> str:
    n, unit = _scaled(value, scale_by, (" ", "K", "M"), 1000, 750 * 1000)
    return f"{n:7d} {unit} "


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """The allocator statistics as a table, in torch.cuda.memory_summary's layout (line for
    line, with MUSA for CUDA), so that musa's and CUDA's logs diff."""
    idx = _get_device_index(device, optional=True)
    stats = memory_stats(idx)
    pools = [("all", None)] if abbreviated else [
        ("all", None), ("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
    rule, double = "-" * 75, "=" * 75
    lines = [double,
             f" {'':16} PyTorch MUSA memory summary, device ID {idx:<17d} ",
             rule,
             f"  {'':9} MUSA OOMs: {stats['num_ooms']:<12d} | {'':6} musaMalloc retries: "
             f"{stats['num_alloc_retries']:<8d}  ",
             double,
             "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]

    def row(label: str, prefix: str, fmt, scale_prefix: str) -> str:
        cells = [fmt(stats[prefix + k], stats[scale_prefix + k]) for k in ("current", "peak", "allocated", "freed")]
        return f" {label:<21} | " + " | ".join(cells) + " "

    for key, title, fmt in (
            ("allocated_bytes", "Allocated memory", _summary_size),
            ("active_bytes", "Active memory", _summary_size),
            ("requested_bytes", "Requested memory", _summary_size),
            ("reserved_bytes", "GPU reserved memory", _summary_size),
            ("inactive_split_bytes", "Non-releasable memory", _summary_size),  # free pieces of split segments
            ("allocation", "Allocations", _summary_count),
            ("active", "Active allocs", _summary_count),
            ("segment", "GPU reserved segments", _summary_count),
            ("inactive_split", "Non-releasable allocs", _summary_count)):
        lines.append(rule)
        lines += [row(label or title, f"{key}.{pool}.", fmt, f"{key}.all.") for pool, label in pools]
    for key, title in (("oversize_allocations", "Oversize allocations"),
                       ("oversize_segments", "Oversize GPU segments")):
        lines += [rule, row(title, f"{key}.", _summary_count, f"{key}.")]
    lines.append(double)
    return "".join(f"|{line}|\n" for line in lines)


def memory_stats_all() -> dict[str, int]:
    """memory_stats of every device added together (peaks: the highest), as torch_musa's."""
    total: dict[str, int] = collections.defaultdict(int)
    for d in range(torch.musa.device_count()):
        for k, v in memory_stats(d).items():
            total[k] = max(total[k], v) if k.endswith(".peak") else total[k] + v
    return dict(total)


# ----------------------------------------------------------------------------- raw allocations
def caching_allocator_alloc(size: int, device: Any = None, stream: Any = None) -> int:
    """``size`` bytes of musa memory for another framework, freed by caching_allocator_delete."""
    _lazy._lazy_init()
    idx = torch.musa.current_device() if device is None else _get_device_index(device)
    if stream is None:
        stream = torch.musa.current_stream(idx)
    if isinstance(stream, torch.Stream):
        stream = stream.stream_id
    if not isinstance(stream, int):
        raise TypeError("Invalid type for stream argument, must be `torch.musa.Stream` or `int` "
                        "representing a stream id")
    return _C._raw_alloc(int(size), idx, stream)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Free memory from caching_allocator_alloc (its device and stream are remembered)."""
    _C._raw_delete(int(mem_ptr))


# ----------------------------------------------------------------------------- the allocator's two homes
class _RuntimeAllocator:
    """The host driver's: the musa runtime's caching allocator (``_C``) keeps caching,
    history, snapshots and pluggable allocators itself."""

    def caching_enable(self, value: bool) -> None:
        _C._caching_allocator_enable(value)

    def caching_is_enabled(self) -> bool:
        return bool(_C._caching_allocator_is_enabled())

    def memory_snapshot(self, mempool_id, include_traces: bool) -> list[dict[str, Any]]:
        pool = None if mempool_id is None else tuple(mempool_id)
        return _C._memory_snapshot(pool, include_traces)["segments"]

    def record_memory_history(self, enabled, context, stacks, max_entries, clear_history,
                              compile_context, global_record_annotations, skip_actions) -> None:
        _lazy._lazy_init()
        _C._record_memory_history(enabled, context, stacks, min(int(max_entries), sys.maxsize),
                                  clear_history, list(skip_actions or []))

    def snapshot(self, device: Any, augment_with_fx_traces: bool) -> dict[str, Any]:
        s = _C._memory_snapshot(None, True)
        if augment_with_fx_traces:
            s = torch.cuda.memory._augment_memory_snapshot_stack_traces(s)
        return s

    def backend(self) -> str:
        return _C._allocator_backend()

    def change_current_allocator(self, allocator: "_MUSAAllocator") -> None:
        _C._musa_changeCurrentAllocator(allocator.allocator())

    def pools(self, mem_pool, mem_pool_context, use_mem_pool):
        """(MemPool, MemPoolContext, use_mem_pool): the runtime's, defined in this module."""
        return mem_pool, mem_pool_context, use_mem_pool

    def memory_fraction(self, idx: int) -> float:
        return _C._get_memory_fraction(idx)

    def list_gpu_processes(self, idx: int) -> str:
        lines = [f"GPU:{idx}"]
        if not _lazy.is_initialized():
            lines.append("no processes are running")
        else:
            mem = memory_reserved(idx) / (1024 * 1024)
            lines.append(f"process {os.getpid():>10d} uses {mem:>12.3f} MB GPU memory")
        return "\n".join(lines)


class _CudaAllocator:
    """The cuda driver's: musa memory is CUDA's caching allocator (musa:i is cuda:i), so
    caching, snapshots, history and pools are torch.cuda's."""

    def __init__(self):
        # torch.cuda's functions, bound at import, before cuda_compat points torch.cuda's names
        # at torch.musa's (calling through the names then came back here, without end).
        self._memory = {name: getattr(torch.cuda.memory, name) for name in (
            "memory_snapshot", "_record_memory_history", "_snapshot", "get_allocator_backend",
            "get_per_process_memory_fraction", "list_gpu_processes")}
        # torch.cuda's C functions, bound here once for the same reason.
        self._caching_enable = getattr(torch._C, "_cuda_cudaCachingAllocator_enable", None)
        self._caching_is_enabled = getattr(torch._C, "_cuda_cudaCachingAllocator_is_enabled", None)
        # Older PyTorch (2.11) can switch CUDA's caching but not say whether it is on: the last
        # switch made through here, which is the only one under cuda_compat.
        self._caching_on = True

    def caching_enable(self, value: bool) -> None:
        if self._caching_enable is None:
            raise RuntimeError(f"caching_allocator_enable: PyTorch {torch.__version__} has no switch "
                               "for CUDA's caching allocator (the cuda driver's memory)")
        _lazy._lazy_init()
        self._caching_enable(value)
        self._caching_on = value

    def caching_is_enabled(self) -> bool:
        _lazy._lazy_init()
        return bool(self._caching_is_enabled()) if self._caching_is_enabled else self._caching_on

    def memory_snapshot(self, mempool_id, include_traces: bool) -> list[dict[str, Any]]:
        return self._memory["memory_snapshot"](mempool_id, include_traces=include_traces)

    def record_memory_history(self, enabled, context, stacks, max_entries, clear_history,
                              compile_context, global_record_annotations, skip_actions) -> None:
        return self._memory["_record_memory_history"](
            enabled, context=context, stacks=stacks, max_entries=max_entries,
            clear_history=clear_history, compile_context=compile_context,
            global_record_annotations=global_record_annotations, skip_actions=skip_actions)

    def snapshot(self, device: Any, augment_with_fx_traces: bool) -> dict[str, Any]:
        return self._memory["_snapshot"](device, augment_with_fx_traces)

    def backend(self) -> str:
        return self._memory["get_allocator_backend"]()

    def change_current_allocator(self, allocator: "_MUSAAllocator") -> None:
        raise RuntimeError("torch.musa.memory.change_current_allocator: under the cuda driver musa "
                           "memory is CUDA's allocator; use torch.cuda.memory.change_current_allocator "
                           "with a CUDAPluggableAllocator")

    def pools(self, mem_pool, mem_pool_context, use_mem_pool):
        """CUDA's allocator serves musa memory: its pools are musa's."""
        return (torch.cuda.MemPool, getattr(torch.cuda, "MemPoolContext", mem_pool_context),
                torch.cuda.use_mem_pool)

    def memory_fraction(self, idx: int) -> float:
        # CUDA's caching allocator holds the fraction set_per_process_memory_fraction set
        return self._memory["get_per_process_memory_fraction"](idx)

    def list_gpu_processes(self, idx: int) -> str:
        # the GPU's management library counts by physical index
        return self._memory["list_gpu_processes"](CONFIG.physical_indices[idx])


_ALLOCATOR = pick(host=_RuntimeAllocator, cuda=_CudaAllocator)()


# ----------------------------------------------------------------------------- caching on/off
def caching_allocator_enable(value: bool = True) -> None:
    """Turn the caching allocator's caching on (the default) or off.

    While it is off, each new musa allocation gets memory of its own from the driver and gives
    it back as soon as it is freed, so ``memory_reserved`` falls with ``memory_allocated``
    (useful to find use-after-free and out-of-bounds bugs, which cached blocks hide). What
    decides is the mode when a block was allocated, as on CUDA: blocks cached before stay
    cached. Allocations into a private pool (``MemPool``, graph capture) keep their pool's
    caching: a captured graph refers to that memory. Under the cuda driver this is CUDA's
    caching allocator's switch (``torch.cuda.caching_allocator_enable``); unlike torch.cuda's,
    a call before initialisation is not dropped (it initialises musa)."""
    if not isinstance(value, bool):
        raise TypeError(f"caching_allocator_enable(value) takes a bool, got {type(value).__name__}")
    _ALLOCATOR.caching_enable(value)


def _caching_allocator_is_enabled() -> bool:
    """Whether the caching allocator caches freed blocks (see caching_allocator_enable)."""
    return _ALLOCATOR.caching_is_enabled()


@contextlib.contextmanager
def caching_allocator_disabled():
    """Caching off inside the block, then back to what it was (also on an error)."""
    prev = _caching_allocator_is_enabled()
    caching_allocator_enable(False)
    try:
        yield
    finally:
        caching_allocator_enable(prev)


# ----------------------------------------------------------------------------- history and snapshots
def memory_snapshot(mempool_id: tuple[int, int] | None = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """Every segment the allocator holds (of one pool with ``mempool_id``), with its blocks."""
    return _ALLOCATOR.memory_snapshot(mempool_id, include_traces)


def _record_memory_history_legacy(enabled: bool, record_context: bool = True,
                                  trace_alloc_max_entries: int = 1,
                                  trace_alloc_record_context: bool = False, device: Any = None,
                                  record_context_cpp: bool = False, clear_history: bool = False,
                                  compile_context: bool = False,
                                  global_record_annotations: bool = False,
                                  skip_actions: list[str] | None = None) -> None:
    if not enabled:
        return _record_memory_history_impl(None, clear_history=clear_history)
    context = ("all" if trace_alloc_record_context else "state") if record_context else None
    return _record_memory_history_impl(
        "all" if trace_alloc_max_entries > 1 else "state", context,
        "all" if record_context_cpp else "python", max(trace_alloc_max_entries, 1), device,
        clear_history, compile_context, global_record_annotations, skip_actions)


def _record_memory_history(enabled: str | bool | None = "all", *args, **kwargs) -> None:
    """Record stacks of live allocations (``"state"``) and a history of alloc/free calls
    (``"all"``) for _snapshot() and torch.cuda._memory_viz; ``None`` stops. Arguments as
    torch.cuda.memory._record_memory_history (context, stacks, max_entries, clear_history,
    skip_actions); the boolean form is the legacy one."""
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _record_memory_history_impl(enabled: str | None = "all", context: str | None = "all",
                                stacks: str = "all", max_entries: int = sys.maxsize,
                                device: Any = None, clear_history: bool = False,
                                compile_context: bool = False,
                                global_record_annotations: bool = False,
                                skip_actions: list[str] | None = None) -> None:
    return _ALLOCATOR.record_memory_history(enabled, context, stacks, max_entries, clear_history,
                                            compile_context, global_record_annotations, skip_actions)


_record_memory_history.__signature__ = inspect.signature(_record_memory_history_impl)  # type: ignore[attr-defined]


def _snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """The allocator's state in torch.cuda.memory._snapshot()'s format: ``segments`` (with
    blocks and their frames) and ``device_traces`` (one list of actions per device)."""
    return _ALLOCATOR.snapshot(device, augment_with_fx_traces)


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    """Pickle _snapshot() to ``filename`` (open it at pytorch.org/memory_viz)."""
    s = _snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def _save_segment_usage(filename: str = "output.svg", snapshot: dict | None = None) -> None:
    with open(filename, "w") as f:
        f.write(_memory_viz.segments(_snapshot() if snapshot is None else snapshot))


def _save_memory_usage(filename: str = "output.svg", snapshot: dict | None = None) -> None:
    with open(filename, "w") as f:
        f.write(_memory_viz.memory(_snapshot() if snapshot is None else snapshot))


# ----------------------------------------------------------------------------- allocators
def get_allocator_backend() -> str:
    """``native`` (the caching allocator) or ``pluggable`` (a MUSAPluggableAllocator)."""
    return _ALLOCATOR.backend()


class _MUSAAllocator:
    """Wrapper over a musa memory allocator (``torch.cuda.memory._CUDAAllocator``'s mirror)."""

    def __init__(self, allocator: Any):
        self._allocator = allocator

    def allocator(self) -> Any:
        return self._allocator


class MUSAPluggableAllocator(_MUSAAllocator):
    """A user's malloc/free from a shared library, as CUDAPluggableAllocator:
    ``void* alloc(ssize_t size, int device, void* stream)`` and
    ``void free(void* ptr, ssize_t size, int device, void* stream)`` (``stream``: the stream
    id). Make it current with change_current_allocator, or give it to a MemPool."""

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str):
        lib = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(lib, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(lib, free_fn_name), ctypes.c_void_p).value
        if alloc_fn is None or free_fn is None:
            raise AssertionError(f"{path_to_so_file}: {alloc_fn_name} or {free_fn_name} is NULL")
        self._lib = lib  # keeps the library loaded
        self._allocator = _C._musa_customAllocator(alloc_fn, free_fn)


def change_current_allocator(allocator: _MUSAAllocator) -> None:
    """Make ``allocator`` serve all musa memory; only before the first musa allocation."""
    _ALLOCATOR.change_current_allocator(allocator)


# ----------------------------------------------------------------------------- memory pools
def _raw_allocator(allocator: Any) -> Any:
    if allocator is None:
        return None
    return allocator.allocator() if isinstance(allocator, _MUSAAllocator) else allocator


class MemPool:
    """A private pool of the caching allocator, as torch.cuda.MemPool: allocations made
    under use_mem_pool(pool) come from (and are cached in) this pool only.

    ``allocator``: a MUSAPluggableAllocator whose malloc/free make this pool's segments;
    ``use_on_oom``: other allocations may use its free blocks before failing;
    ``no_split``: its blocks are never split.
    """

    def __init__(self, allocator: Any = None, use_on_oom: bool = False, no_split: bool = False):
        _lazy._lazy_init()
        self._device = torch.musa.current_device()
        self._allocator = allocator
        self._id = tuple(_C._mempool_new_id(True))
        _C._mempool_create(self._device, self._id, _raw_allocator(allocator), use_on_oom, no_split)

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id, ``(0, n)`` for user pools (graph pools are ``(n, 0)``)."""
        return self._id

    @property
    def allocator(self) -> Any:
        return self._allocator

    def use_count(self) -> int:
        """How many users hold the pool (1, plus one per open use_mem_pool)."""
        return _C._mempool_use_count(self._device, self._id)

    def snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
        """memory_snapshot() of this pool's segments only."""
        return memory_snapshot(self._id, include_traces=include_traces)

    def __del__(self) -> None:
        try:
            _C._musa_releasePool(self._device, self._id)
            _C._empty_cache_pool(self._id)
        except Exception:  # interpreter shutdown, or a failed __init__
            pass


class MemPoolContext:
    """Makes ``pool`` the active pool of this thread while it lives (or inside ``with``):
    musa allocations of the thread come from it. ``active_pool()`` names it."""

    _active = threading.local()

    def __init__(self, pool: MemPool, device: Any = None):
        self._pool = pool
        self._device = torch.musa.current_device() if device is None else _get_device_index(device)
        self._prev = getattr(MemPoolContext._active, "pool", None)
        self._open = True
        MemPoolContext._active.pool = pool
        _C._musa_beginAllocateCurrentThreadToPool(self._device, pool.id)

    @staticmethod
    def active_pool() -> MemPool | None:
        return getattr(MemPoolContext._active, "pool", None)

    def close(self) -> None:
        if self._open:
            self._open = False
            MemPoolContext._active.pool = self._prev
            _C._musa_endAllocateToPool(self._device, self._pool.id)
            _C._musa_releasePool(self._device, self._pool.id)

    def __enter__(self) -> "MemPoolContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None):
    """Route this thread's musa allocations on ``device`` to ``pool`` inside the block."""
    ctx = MemPoolContext(pool, device)
    try:
        yield
    finally:
        ctx.close()


# The allocator's pools: under the cuda driver CUDA's (its allocator serves musa memory there).
MemPool, MemPoolContext, use_mem_pool = _ALLOCATOR.pools(  # type: ignore[misc,assignment]  # noqa: F811
    MemPool, MemPoolContext, use_mem_pool)


# ----------------------------------------------------------------------------- unified memory
@contextlib.contextmanager
def use_unified_cpu_allocator(device: Any = None):
    """Inside, CPU tensors are made in musa memory the device uses (unified memory, as
    PYTORCH_MUSA_ALLOC_CONF=cpu:unified for the whole process): ``.to("musa")`` and
    ``torch.load(map_location="musa")`` of them copy nothing and the musa tensor shares
    the CPU tensor's bytes. Under the host driver they count as ``device``'s memory;
    under the cuda driver they are CUDA managed memory, which CUDA's caching allocator
    does not count (synchronize before the CPU reads what the device wrote)."""
    _lazy._lazy_init()
    idx = torch.musa.current_device() if device is None else _get_device_index(device)
    prev = _C._unified_cpu_allocator()
    _C._set_unified_cpu_allocator(idx)
    try:
        yield
    finally:
        _C._set_unified_cpu_allocator(prev)


if CONFIG.allocator.cpu_unified:  # PYTORCH_MUSA_ALLOC_CONF=cpu:unified: from the start
    _C._set_unified_cpu_allocator(0)

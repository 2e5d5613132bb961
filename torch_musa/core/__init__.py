"""``torch.musa``: the device module, a mirror of ``torch.cuda``."""
import sys as _sys
from pathlib import Path as _Path

import torch as _torch

from torch_musa import _C
from torch_musa._driver import serves_configured_driver as _serves_configured_driver
from torch_musa.config import CONFIG as _CONFIG
from torch_musa.core import _lazy, comm
from torch_musa.core._lazy import (
    DeferredMusaCallError,
    _is_in_bad_fork,
    _lazy_call,
    _lazy_init,
    init,
    is_initialized,
)
from torch_musa.core.device import (
    _get_device_index,
    can_device_access_peer,
    current_device,
    device,
    device_count,
    device_of,
    get_arch_list,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_gencode_flags,
    is_available,
    is_bf16_supported,
    set_device,
    synchronize,
)
from torch_musa.core.graphs import (
    _POOL_HANDLE,
    MUSAGraph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
    update_musa_graph_with_profile,
)
from torch_musa.core import jiterator, memory, nvtx
from torch_musa.core import ipc as _ipc  # torch.multiprocessing pickles musa storages by shared memory
from torch_musa.core.memory import (
    get_per_process_memory_fraction,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    list_gpu_processes,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
    MemPool,
    MemPoolContext,
    MUSAPluggableAllocator,
    OutOfMemoryError,
    caching_allocator_alloc,
    caching_allocator_delete,
    caching_allocator_disabled,
    caching_allocator_enable,
    change_current_allocator,
    empty_cache,
    get_allocator_backend,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_all,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
    use_unified_cpu_allocator,
)
# The real torch_musa exports these at its top level (torch.cuda keeps them in torch.cuda.memory).
from torch_musa.core.memory import _dump_snapshot, _record_memory_history, _snapshot
from torch_musa.core.random import (
    default_generators as _default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from torch_musa.core.streams import (
    Event,
    ExternalStream,
    Stream,
    StreamContext,
    _sleep,
    current_stream,
    default_stream,
    get_stream_from_external,
    set_stream,
    stream,
)
from torch_musa.core import monitoring, mudnn, profiler, runtime_api, sync_debug, tunable, version
from torch_musa.core.mudnn import flags, set_flags

version.install()  # torch.version.musa
# find_package(TorchMusa)'s prefix for CMAKE_PREFIX_PATH, as torch.utils.cmake_prefix_path
# (share/cmake/TorchMusa: the torch_musa target, the runtime library and headers).
cmake_prefix_path = str(_Path(__file__).resolve().parent.parent / "share" / "cmake")
from torch_musa.core.monitoring import (
    clock_rate,
    device_memory_used,
    memory_usage,
    power_draw,
    temperature,
    utilization,
)
from torch_musa.core.runtime_api import (
    MusaError,
    _DeviceGuard,
    _exchange_device,
    _maybe_exchange_device,
    _set_allocator_settings,
    _set_stream_by_id,
    amp_definitely_not_available,
    check_error,
    current_blas_handle,
    current_blaslt_handle,
    current_solver_handle,
    fork_rng,
    has_half,
    has_magma,
    ipc_collect,
    is_tf32_supported,
    musaStatus,
    musart,
)
from torch_musa.core.sync_debug import get_sync_debug_mode, set_sync_debug_mode
from torch_musa.core.tensor_types import make_sparse_module as _make_sparse_module
from torch_musa.core.tensor_types import make_storages as _make_storages
from torch_musa.core.tensor_types import make_types as _make_types

globals().update(_make_types())
globals().update(_make_storages())
sparse = _make_sparse_module(__name__ + ".sparse")
del _make_types, _make_storages, _make_sparse_module


def get_amp_supported_dtype():
    """The dtypes ``torch.autocast("musa", dtype=...)`` accepts: float16, bfloat16 where
    the profile has it, and float32 (autocast to float32 is accepted as on CUDA)."""
    return ([_torch.float16] + ([_torch.bfloat16] if _CONFIG.profile.supports_bf16 else [])
            + [_torch.float32])


def _is_compiled() -> bool:
    """Whether the C++ runtime (torch_musa._C) is loaded and serving the configured driver,
    as ``torch.cuda._is_compiled()`` says whether torch was built with CUDA."""
    return _serves_configured_driver()


# The real torch_musa's binding module is torch_musa._MUSAC (torch.musa._MUSAC too);
# here it is torch_musa._C, so both names, and `from torch_musa._MUSAC import ...`, mean it.
_MUSAC = _C
_sys.modules.setdefault("torch_musa._MUSAC", _C)


# Names of torch.musa that live in layers above it, registered by the package root as
# loaders and loaded on first use (the real torch_musa's torch.musa.BuildExtension and
# MUSAExtension are torch_musa.utils.musa_extension's, whose setuptools import is slow).
_provided: dict = {}


def __getattr__(name: str):
    if name in _provided:
        return _provided[name]()
    if name == "default_generators":  # a tuple built on each read, as devices may be narrowed
        return _default_generators()
    # `_initialized` reads live, as torch.cuda's module global does
    # (torch.utils.checkpoint saves the device RNG only when it is true).
    if name == "_initialized":
        return _lazy.is_initialized()
    raise AttributeError(f"module 'torch.musa' has no attribute {name!r}")

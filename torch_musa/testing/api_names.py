"""The real torch_musa's public, user-facing names, and which of them exist here.

``REAL_NAMES`` lists what the real package's ``torch_musa/__init__.py`` and
``core/*.py`` export to users (``torch.musa`` is that package there), leaving
out its internal patch helpers (``register_musa_hook``, ``set_attributes``,
``overwrite_cuda_api``, ``parseEnvForUMM``, ...). ``REAL_SUBPACKAGE_NAMES``
lists its ``optim``, ``distributed``, ``utils`` and ``testing`` exports.
Run ``python -m torch_musa.testing.api_names`` for the count (and for how many of
``torch.cuda.__all__`` torch.musa has). ``OUT_OF_REACH`` names what is left out on purpose.
"""
from __future__ import annotations

import importlib

import torch

REAL_NAMES = (
    # device
    "device", "device_of", "set_device", "current_device", "is_available", "device_count",
    "synchronize", "get_device_name", "get_device_capability", "get_device_properties",
    "can_device_access_peer", "_exchange_device", "_maybe_exchange_device", "_DeviceGuard",
    "get_arch_list", "is_bf16_supported", "is_tf32_supported",
    "current_blas_handle", "current_blaslt_handle", "cmake_prefix_path",
    # streams
    "_set_stream_by_id", "set_stream", "current_stream", "default_stream", "ExternalStream",
    "StreamContext", "stream", "Stream", "Event", "_sleep",
    # amp
    "amp", "amp_definitely_not_available", "get_amp_supported_dtype",
    # memory
    "memory", "set_per_process_memory_fraction", "empty_cache", "memory_stats",
    "memory_stats_as_nested_dict", "reset_accumulated_memory_stats", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_snapshot",
    "memory_summary", "mem_get_info", "get_allocator_backend", "MUSAPluggableAllocator",
    "change_current_allocator", "MemPool", "MemPoolContext", "use_mem_pool", "memory_stats_all",
    "_record_memory_history", "_dump_snapshot", "_set_allocator_settings", "OutOfMemoryError",
    "use_unified_cpu_allocator",
    # lazy initialisation, runtime API
    "_lazy_init", "_lazy_call", "_initialized", "_is_in_bad_fork", "is_initialized", "musart",
    "MusaError", "check_error", "DeferredMusaCallError", "ipc_collect",
    # random
    "get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all", "manual_seed",
    "manual_seed_all", "seed", "seed_all", "initial_seed", "fork_rng",
    # graphs
    "MUSAGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
    "make_graphed_callables", "update_musa_graph_with_profile",
    # collectives, extensions
    "mccl", "BuildExtension", "MUSAExtension",
    # legacy storage types
    "DoubleStorage", "FloatStorage", "LongStorage", "IntStorage", "ShortStorage", "CharStorage",
    "ByteStorage", "HalfStorage", "BoolStorage", "BFloat16Storage",
)

REAL_SUBPACKAGE_NAMES = {
    "torch_musa.optim": ("FusedLAMB", "FusedAdam", "FusedAdamW"),
    "torch_musa.distributed.fsdp": ("ShardedGradScaler",),
    "torch_musa.utils": ("BuildExtension", "MUSAExtension"),
    "torch_musa.testing": (
        "DefaultComparator", "BooleanComparator", "AbsDiffComparator", "RelDiffComparator",
        "QuantizedComparator", "OpTest", "InplaceOpChek", "get_raw_data", "get_all_support_types",
        "get_all_support_types_withfp16", "get_float_types", "get_all_types",
        "skip_if_musa_unavailable", "skip_if_not_multiple_musa_device", "MULTIGPU_AVAILABLE",
        "test_on_nonzero_card_if_multiple_musa_device", "gen_ip_port", "get_musa_arch",
        "get_cycles_per_ms", "freeze_rng_state", "cpu_and_musa", "needs_musa", "assert_equal"),
    "torch_musa.testing.common_fsdp": ("skip_if_lt_x_gpu", "FSDPTest", "run_subtests",
                                       "check_sharded_parity"),
}


# torch.cuda names torch.musa leaves out on purpose, and why.
OUT_OF_REACH = {
    "GreenContext": "partitions a GPU's SMs and workqueues between contexts; the host driver's "
                    "kernels run on CPU threads, with no SMs to hand out, and under the cuda "
                    "driver CUDA green contexts would need musa streams made from them",
}


def present(name: str) -> bool:
    """Whether ``torch.musa.<name>`` (the real package's ``torch_musa.<name>``) exists."""
    return hasattr(torch.musa, name)


def _module_has(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def musa_spelling(name: str) -> str:
    """torch.cuda's name as torch.musa spells it (cudaStatus -> musaStatus, CUDAGraph -> MUSAGraph)."""
    for cuda, musa in (("CUDA", "MUSA"), ("cuda", "musa"), ("Cuda", "Musa"), ("nccl", "mccl")):
        name = name.replace(cuda, musa)
    return name


def cuda_names_missing() -> list[str]:
    """The names of ``torch.cuda.__all__`` torch.musa has under neither spelling."""
    return [n for n in torch.cuda.__all__ if not present(n) and not present(musa_spelling(n))]


def report() -> dict:
    """{"core": (found, total, missing), module: (found, total, missing), ...,
    "torch.cuda": (found, total, missing)}."""
    missing = [n for n in REAL_NAMES if not present(n)]
    out = {"core": (len(REAL_NAMES) - len(missing), len(REAL_NAMES), missing)}
    for module, names in REAL_SUBPACKAGE_NAMES.items():
        gone = [n for n in names if not _module_has(module, n)]
        out[module] = (len(names) - len(gone), len(names), gone)
    gone = cuda_names_missing()
    out["torch.cuda"] = (len(torch.cuda.__all__) - len(gone), len(torch.cuda.__all__), gone)
    return out


if __name__ == "__main__":
    for key, (found, total, gone) in report().items():
        print(f"{key}: {found}/{total}" + (f"  missing: {', '.join(gone)}" if gone else ""))
    for name, why in OUT_OF_REACH.items():
        print(f"left out on purpose: {name} ({why})")

"""The runtime's Python side: hands the configuration to the C++ runtime (``_C``)
before the device is registered."""
from __future__ import annotations

import torch

from torch_musa import _C
from torch_musa.config import CONFIG
from torch_musa.config.variables import AllocatorSettings, host_allocator_arguments

# c10::ScalarType numbering: a dtype's position here.
_SCALAR_TYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                 torch.float16, torch.float32, torch.float64, torch.complex32,
                 torch.complex64, torch.complex128, torch.bool, torch.qint8,
                 torch.quint8, torch.qint32, torch.bfloat16)


def configure() -> None:
    if CONFIG.driver == "cuda" and not _C._cuda_driver_built():
        raise RuntimeError(
            "TORCH_MUSA_DRIVER=cuda, but this torch_musa was built without CUDA "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda}). Reinstall it "
            "where torch has CUDA and a CUDA toolkit is present, or unset "
            "TORCH_MUSA_DRIVER for the host driver."
        )
    _C._use_driver(CONFIG.driver)
    p = CONFIG.profile
    _C._configure(
        CONFIG.device_count,
        p.name,
        CONFIG.capacity_bytes,
        CONFIG.host_limit_bytes,
        p.clock_rate_khz * 1e3,
        [_SCALAR_TYPES.index(d) for d in p.unsupported_dtypes()],
    )
    if CONFIG.driver != "cuda":  # the cuda driver's allocator is CUDA's, configured through its variable
        set_host_allocator_settings(CONFIG.allocator)
        # Host kernels run on the thread that calls them, in its OpenMP team. Autograd runs a
        # non-CPU device's backward on a thread of its own, whose team then competed with the
        # caller's for the same cores: with 2 threads a small-op training step took 1.66x its
        # 1-thread time (benchmarks/bench_threads.py). Run musa's backward on the caller's
        # thread, as the CPU device's (this thread's autograd state; the thread count, and so
        # the bits, are the same).
        torch._C._set_multithreading_enabled(False)


def set_host_allocator_settings(settings: AllocatorSettings, given: str | None = None) -> None:
    """Hand ``settings`` to the host driver's caching allocator: the one place they reach C++,
    at start-up and from ``torch.musa._set_allocator_settings``. ``host_allocator_arguments``
    checks them (one message for an option it does not know, naming ``given``) and puts them
    in the binding's order."""
    _C._set_allocator_settings(*host_allocator_arguments(settings, given))

"""The rest of torch.cuda's runtime surface under musa's names (and the real
torch_musa's): device exchange, stream by id, the runtime API module and its
errors, BLAS handles, TF32, IPC collection, the memory fraction's getter,
pinned host memory statistics, the allocator settings string and ``fork_rng``.

Under the cuda driver, the GPU underneath answers where torch.cuda would ask
CUDA (torch.cuda's functions are taken at import, before cuda_compat may put
musa's in their place).
"""
from __future__ import annotations

import contextlib
import enum
import threading
from typing import Any, Iterable

import torch

from torch_musa import _C
from torch_musa._driver import pick
from torch_musa._runtime import set_host_allocator_settings
from torch_musa.config import CONFIG
from torch_musa.config.variables import VARIABLES
from torch_musa.core import _lazy
from torch_musa.core.device import _get_device_index, current_device, is_available

_cuda = {name: getattr(torch.cuda, name) for name in (
    "cudart", "current_blas_handle", "current_solver_handle",
    "ipc_collect", "is_tf32_supported", "mem_get_info")
    if hasattr(torch.cuda, name)}


# ----------------------------------------------------------------------------- device exchange
def _exchange_device(device: int) -> int:
    """Make ``device`` current and return the previous index; -1 (no device) changes nothing."""
    if device < 0:
        return -1
    _lazy._lazy_init()
    prev = _C._get_device()
    if prev != device:
        _C._set_device(_get_device_index(device))
    return prev


def _maybe_exchange_device(device: int) -> int:
    """As :func:`_exchange_device`; torch.cuda's variant only differs in not creating a
    context on a device that has none, which the musa runtime never does eagerly."""
    return _exchange_device(device)


class _DeviceGuard:
    """Context manager over a device index (torch.cuda._DeviceGuard)."""

    def __init__(self, index: int):
        self.idx = index
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _exchange_device(self.idx)

    def __exit__(self, *exc) -> bool:
        self.idx = _maybe_exchange_device(self.prev_idx)
        return False


def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
    """Make the stream named by (id, device index, device type code) current."""
    stream = torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
    if stream.device.type != "musa":
        raise ValueError(f"_set_stream_by_id: expected a musa stream, got one on {stream.device}")
    _lazy._lazy_init()
    torch.accelerator.set_stream(stream)


# ----------------------------------------------------------------------------- runtime API module
class _MusaErrorCode(enum.IntEnum):
    """musaError_t values (the same numbers as cudaError_t's)."""

    success = 0
    invalidValue = 1
    memoryAllocation = 2
    initializationError = 3
    invalidDevice = 101
    notReady = 600
    hostMemoryAlreadyRegistered = 712
    hostMemoryNotRegistered = 713
    notSupported = 801


class musaStatus:  # noqa: N801 (torch.cuda.cudaStatus's spelling)
    """The status codes stream and event queries compare against (torch.cuda.cudaStatus's
    twin), with the runtime's numbers: not-ready is musaErrorNotReady, 600."""

    SUCCESS: int = int(_MusaErrorCode.success)
    ERROR_NOT_READY: int = int(_MusaErrorCode.notReady)


# torch.cuda's build facts: every musa card computes float16; MAGMA is not part of
# musa (the host driver's linear algebra is LAPACK's; the cuda driver's is CUDA's build's).
has_half: bool = True
has_magma: bool = pick(host=False, cuda=bool(torch.cuda.has_magma))


_ERROR_TEXT = {
    0: "no error",
    1: "invalid argument",
    2: "out of memory",
    3: "initialization error",
    101: "invalid device ordinal",
    600: "device not ready",
    712: "part or all of the requested memory range is already mapped",
    713: "pointer does not correspond to a registered memory region",
    801: "operation not supported",
}


class _HostMusart:
    """What ``torch.cuda.cudart()`` offers, for the host driver: device memory is
    host RAM, so registering host memory only records the range (``is_pinned`` then
    says True, as CUDA's does), and the profiler calls succeed with no external
    profiler attached, as CUDA's do."""

    musaError = _MusaErrorCode

    @staticmethod
    def musaGetErrorString(error: int) -> str:  # noqa: N802 (runtime API spelling)
        return _ERROR_TEXT.get(int(error), "unrecognized error code")

    @staticmethod
    def musaProfilerStart() -> _MusaErrorCode:  # noqa: N802
        return _MusaErrorCode.success

    @staticmethod
    def musaProfilerStop() -> _MusaErrorCode:  # noqa: N802
        return _MusaErrorCode.success

    # The runtime keeps the registered ranges (so that is_pinned sees them): a range
    # overlapping a registered one is already registered, and only a registered start
    # can be unregistered.
    @staticmethod
    def musaHostRegister(ptr: int, size: int, flags: int) -> _MusaErrorCode:  # noqa: N802
        if not ptr or size <= 0:
            return _MusaErrorCode.invalidValue
        if not _C._host_register(int(ptr), int(size)):
            return _MusaErrorCode.hostMemoryAlreadyRegistered
        return _MusaErrorCode.success

    @staticmethod
    def musaHostUnregister(ptr: int) -> _MusaErrorCode:  # noqa: N802
        if not ptr:
            return _MusaErrorCode.invalidValue
        if not _C._host_unregister(int(ptr)):
            return _MusaErrorCode.hostMemoryNotRegistered
        return _MusaErrorCode.success

    @staticmethod
    def musaMemGetInfo(device: int) -> tuple[int, int]:  # noqa: N802
        return torch.musa.mem_get_info(device)


def _clear_cuda_last_error() -> None:
    """Reset CUDA's last error, found in the libcudart this process already loaded."""
    global _cuda_get_last_error
    if _cuda_get_last_error is None:
        import ctypes
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "libcudart" in line})
        _cuda_get_last_error = ctypes.CDLL(paths[0]).cudaGetLastError if paths else (lambda: 0)
    _cuda_get_last_error()


_cuda_get_last_error: Any = None


class _CudaMusart:
    """CUDA's runtime module under musa's names (the cuda driver).

    Error codes come back as values, as from the host driver's runtime: a failed call
    also clears CUDA's last error, which PyTorch's next kernel-launch check would
    otherwise raise from an unrelated operator. Error strings take plain ints too.
    """

    def __init__(self, cudart):
        self._cudart = cudart

    def musaGetErrorString(self, code) -> str:  # noqa: N802
        return self._cudart.cudaGetErrorString(self._cudart.cudaError(int(code)))

    def __getattr__(self, name: str):
        if not name.startswith("musa"):
            raise AttributeError(f"the musa runtime API module has no attribute {name!r}")
        attr = getattr(self._cudart, "cuda" + name[4:])
        if not callable(attr) or isinstance(attr, type):
            return attr
        error_type = self._cudart.cudaError

        def call(*args, **kwargs):
            res = attr(*args, **kwargs)
            if isinstance(res, error_type) and res != error_type.success:
                _clear_cuda_last_error()
            return res
        return call


class _HostRuntime:
    """The host driver's answers: the musa runtime's own (BLAS and solver are the CPU's)."""

    def musart(self):
        return _HostMusart()

    def blas_handle(self) -> int:
        return _host_handle("blas")

    def solver_handle(self) -> int:
        return _host_handle("solver")

    def blaslt_handle(self) -> int:
        return _host_handle("blaslt")

    def is_tf32_supported(self) -> bool:
        return CONFIG.profile.arch >= 22

    def ipc_collect(self) -> None:
        pass  # the host driver shares no device memory between processes

    def set_allocator_settings(self, env: str, settings) -> None:
        set_host_allocator_settings(settings, env)


class _CudaRuntime:
    """The cuda driver's answers: the GPU's, where torch.cuda would ask CUDA."""

    def musart(self):
        return _CudaMusart(_cuda["cudart"]())

    def blas_handle(self) -> int:
        with torch.cuda.device(current_device()):
            return _cuda["current_blas_handle"]()

    def solver_handle(self) -> int:
        if "current_solver_handle" not in _cuda:  # torch.cuda 2.11 lacks it; 2.13 has it
            raise RuntimeError(f"current_solver_handle: PyTorch {torch.__version__} does not "
                               "expose its cuSOLVER handle (no torch.cuda.current_solver_handle "
                               "in this PyTorch), so the cuda driver cannot give it")
        with torch.cuda.device(current_device()):
            return _cuda["current_solver_handle"]()

    def blaslt_handle(self) -> int:
        raise RuntimeError("current_blaslt_handle: PyTorch does not expose its cuBLASLt handle "
                           "under the cuda driver; use current_blas_handle()")

    def is_tf32_supported(self) -> bool:
        return _cuda["is_tf32_supported"]()

    def ipc_collect(self) -> None:
        _cuda["ipc_collect"]()

    def set_allocator_settings(self, env: str, settings) -> None:
        torch.cuda.memory._set_allocator_settings(env)


_RUNTIME = pick(host=_HostRuntime, cuda=_CudaRuntime)()
_musart_module: Any = None


def musart():
    """The musa runtime API module (torch.cuda.cudart's twin), after initialisation."""
    global _musart_module
    _lazy._lazy_init()
    if _musart_module is None:
        _musart_module = _RUNTIME.musart()
    return _musart_module


class MusaError(RuntimeError):
    """A musa runtime API call's error code, with its text."""

    def __init__(self, code: int) -> None:
        rt = musart()
        msg = rt.musaGetErrorString(rt.musaError(code))
        super().__init__(f"{msg} ({int(code)})")


def check_error(res: int) -> None:
    """Raise :class:`MusaError` unless ``res`` is the runtime's success code."""
    if int(res) != int(musart().musaError.success):
        raise MusaError(res)


# ----------------------------------------------------------------------------- handles, TF32, IPC
_blas = threading.local()


def _host_handle(kind: str) -> int:
    """The host driver's BLAS context for this thread and the current device: one
    object per (thread, device), as cuBLAS handles are; the int is its identity."""
    handles = _blas.__dict__.setdefault(kind, {})
    idx = current_device()
    if idx not in handles:
        handles[idx] = object()
    return id(handles[idx])


def current_blas_handle() -> int:
    """The current thread's BLAS handle on the current device (torch.cuda.current_blas_handle)."""
    _lazy._lazy_init()
    return _RUNTIME.blas_handle()


def current_solver_handle() -> int:
    """The current thread's dense-solver (muSOLVER; cuSOLVER's twin) handle on the current
    device. The host driver's solver is the CPU's LAPACK: one context per (thread, device)."""
    _lazy._lazy_init()
    return _RUNTIME.solver_handle()


def current_blaslt_handle() -> int:
    """The current thread's BLASLt handle on the current device (real torch_musa's name).
    Under the cuda driver PyTorch keeps the cuBLASLt handle internal: this says so."""
    _lazy._lazy_init()
    return _RUNTIME.blaslt_handle()


def is_tf32_supported() -> bool:
    """Whether the current device computes TF32 matmuls (MUSA arch >= 2.2, as bf16)."""
    if not is_available():
        return False
    return _RUNTIME.is_tf32_supported()


def ipc_collect() -> None:
    """Free device memory released by other processes' IPC handles. The host driver
    shares no device memory between processes, so there is nothing to collect."""
    _lazy._lazy_init()
    _RUNTIME.ipc_collect()


def amp_definitely_not_available() -> bool:
    """True when autocast cannot run on musa (no device)."""
    return not is_available()


def _set_allocator_settings(env: str) -> None:
    """Apply allocator options given as PYTORCH_MUSA_ALLOC_CONF's text (CUDA's
    ``_set_allocator_settings``); a bad option raises naming what is allowed."""
    _RUNTIME.set_allocator_settings(env, VARIABLES["PYTORCH_MUSA_ALLOC_CONF"].parse(env))


# ----------------------------------------------------------------------------- RNG
@contextlib.contextmanager
def fork_rng(devices: Iterable[int] | None = None, enabled: bool = True,
             _caller: str = "fork_rng", _devices_kw: str = "devices", device_type: str = "musa"):
    """Fork the CPU and musa RNGs inside the block (torch.random.fork_rng on musa by default)."""
    with torch.random.fork_rng(devices=devices, enabled=enabled, _caller=_caller,
                               _devices_kw=_devices_kw, device_type=device_type):
        yield


__all__ = [
    "_DeviceGuard", "_exchange_device", "_maybe_exchange_device", "_set_stream_by_id",
    "musart", "MusaError", "check_error", "current_blas_handle", "current_blaslt_handle",
    "is_tf32_supported", "ipc_collect", "amp_definitely_not_available",
    "_set_allocator_settings", "fork_rng",
]

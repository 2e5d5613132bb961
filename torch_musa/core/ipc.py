"""Sharing musa tensors between processes through ``torch.multiprocessing``.

On the host driver a musa storage moves into shared memory (a memfd) when it is
first pickled, its file descriptor goes to the receiver (multiprocessing's
``DupFd``, as CPU tensors' do), and the receiver rebuilds a musa storage over the
same pages: writes are seen both ways, and each side's mapping keeps the memory
alive. See csrc/core/SharedMemory.cpp.

Under the cuda driver musa memory is CUDA's, so it travels as CUDA tensors do: a
CUDA IPC handle of a CUDA alias of the storage, with PyTorch's reference counting
(the sender's block stays allocated while a receiver holds it), and the receiver
adopts the opened CUDA storage as a musa one.
"""
import multiprocessing.reduction
import threading

import torch
import torch.multiprocessing.reductions as _reductions
from multiprocessing.reduction import ForkingPickler

from torch_musa import _C
from torch_musa._driver import pick
from torch_musa.core import _lazy
from torch_musa.core.device import synchronize

_cpu_reduce_storage = _reductions.reduce_storage
_StorageWeakRef = _reductions.StorageWeakRef


def _as_byte_tensor(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def rebuild_musa_storage(df, nbytes: int, device: int) -> torch.UntypedStorage:
    """The receiver's side: a musa storage over the sender's shared memory."""
    fd = df.detach()
    return torch.ops.musa_ipc.from_fd(fd, nbytes, device).untyped_storage()


def rebuild_empty_musa_storage(device: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device("musa", device))


# ----------------------------------------------------------------------------- cuda driver
# Storages sent or received through CUDA IPC, by (handle, offset) as torch.cuda's
# shared_cache keys them: a second receipt of one block reuses the first storage.
_cuda_shared: dict = {}
_cuda_shared_lock = threading.Lock()


def _remember(key, storage: torch.UntypedStorage) -> None:
    with _cuda_shared_lock:
        for k in [k for k, ref in _cuda_shared.items() if ref.expired()]:
            del _cuda_shared[k]
        _cuda_shared[key] = _StorageWeakRef(storage)


def _reduce_cuda_ipc(storage: torch.UntypedStorage):
    kernel = _C._kernel_alias(_as_byte_tensor(storage)).untyped_storage()
    # PyTorch's own handle, reference counter and event; the CUDA alias keeps the musa
    # storage alive, and PyTorch keeps the alias in its limbo while a receiver holds it.
    args = kernel._share_cuda_()
    _remember((args[1], args[3]), storage)
    return (rebuild_cuda_ipc_storage, (storage.device.index, *args))


def rebuild_cuda_ipc_storage(musa_index: int, cuda_device: int, handle, nbytes: int,
                             offset: int, ref_handle, ref_offset: int, event_handle,
                             event_sync: bool) -> torch.UntypedStorage:
    """The receiver's side under the cuda driver: the sender's block, opened by CUDA IPC."""
    _lazy._lazy_init()
    with _cuda_shared_lock:
        ref = _cuda_shared.get((handle, offset))
        hit = None if ref is None or ref.expired() else torch.UntypedStorage._new_with_weak_ptr(ref.cdata)
    if hit is not None:
        # already open here: the sender's new reference is released at once, as torch.cuda does
        torch.UntypedStorage._release_ipc_counter(ref_handle, ref_offset, device=cuda_device)
        return hit
    kernel = torch.UntypedStorage._new_shared_cuda(cuda_device, handle, nbytes, offset, ref_handle,
                                                   ref_offset, event_handle, event_sync)
    as_bytes = torch.empty(0, dtype=torch.uint8, device=kernel.device).set_(kernel)
    storage = _C._from_kernel_outputs([as_bytes], musa_index, strict=True)[0].untyped_storage()
    _remember((handle, offset), storage)
    return storage


# ----------------------------------------------------------------------------- both drivers
class _FdSharing:
    """The host driver's: device memory is host RAM, sent as a file descriptor."""

    @staticmethod
    def reduce(storage: torch.UntypedStorage, index: int):
        fd, nbytes = torch.ops.musa_ipc.share_fd(_as_byte_tensor(storage))
        return (rebuild_musa_storage, (multiprocessing.reduction.DupFd(fd), nbytes, index))

    @staticmethod
    def is_shared(storage: torch.UntypedStorage) -> bool:
        return torch.ops.musa_ipc.is_shared(_as_byte_tensor(storage))


class _CudaIpcSharing:
    """The cuda driver's: device memory is CUDA's, sent as a CUDA IPC handle."""

    @staticmethod
    def reduce(storage: torch.UntypedStorage, index: int):
        return _reduce_cuda_ipc(storage)

    @staticmethod
    def is_shared(storage: torch.UntypedStorage) -> bool:
        with _cuda_shared_lock:
            return any(not ref.expired() and ref.cdata == storage._cdata for ref in _cuda_shared.values())


_SHARING = pick(host=_FdSharing, cuda=_CudaIpcSharing)


def reduce_storage(storage: torch.UntypedStorage):
    """ForkingPickler's reducer for storages: musa ones by shared memory, the rest as torch does."""
    if storage.device.type != "musa":
        return _cpu_reduce_storage(storage)
    index = storage.device.index
    if storage.nbytes() == 0:
        return (rebuild_empty_musa_storage, (index,))
    # Pending kernels on the device's streams finish before the bytes move.
    synchronize(storage.device)
    return _SHARING.reduce(storage, index)


def is_shared(storage: torch.UntypedStorage) -> bool:
    """Whether a musa storage is shared with another process (was sent to, or came from, one)."""
    if storage.nbytes() == 0:
        return False
    return _SHARING.is_shared(storage)


ForkingPickler.register(torch.UntypedStorage, reduce_storage)

"""Sharing musa tensors between processes through ``torch.multiprocessing``.

CUDA tensors travel as IPC handles; on the host driver a musa storage moves
into shared memory (a memfd) when it is first pickled, its file descriptor goes
to the receiver (multiprocessing's ``DupFd``, as CPU tensors' do), and the
receiver rebuilds a musa storage over the same pages: writes are seen both ways,
and each side's mapping keeps the memory alive. See csrc/core/SharedMemory.cpp.
"""
import multiprocessing.reduction

import torch
import torch.multiprocessing.reductions as _reductions
from multiprocessing.reduction import ForkingPickler

from torch_musa.core.device import synchronize

_cpu_reduce_storage = _reductions.reduce_storage


def _as_byte_tensor(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def rebuild_musa_storage(df, nbytes: int, device: int) -> torch.UntypedStorage:
    """The receiver's side: a musa storage over the sender's shared memory."""
    fd = df.detach()
    return torch.ops.musa_ipc.from_fd(fd, nbytes, device).untyped_storage()


def rebuild_empty_musa_storage(device: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device("musa", device))


def reduce_storage(storage: torch.UntypedStorage):
    """ForkingPickler's reducer for storages: musa ones by shared memory, the rest as torch does."""
    if storage.device.type != "musa":
        return _cpu_reduce_storage(storage)
    index = storage.device.index
    if storage.nbytes() == 0:
        return (rebuild_empty_musa_storage, (index,))
    # Pending kernels on the device's streams finish before the bytes move.
    synchronize(storage.device)
    fd, nbytes = torch.ops.musa_ipc.share_fd(_as_byte_tensor(storage))
    return (rebuild_musa_storage, (multiprocessing.reduction.DupFd(fd), nbytes, index))


def is_shared(storage: torch.UntypedStorage) -> bool:
    """Whether a musa storage lives in shared memory (was sent to, or came from, another process)."""
    return storage.nbytes() > 0 and torch.ops.musa_ipc.is_shared(_as_byte_tensor(storage))


ForkingPickler.register(torch.UntypedStorage, reduce_storage)

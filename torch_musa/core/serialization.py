"""``torch.load`` onto musa: storages restored at their saved size, as the CPU's.

A storage ``torch.load`` reads for the CPU comes from the file and cannot be
resized, so a tensor whose size and strides claim more bytes than its storage
holds (a crafted or corrupt file) fails to rebuild ("Trying to resize storage
that is not resizable"). PyTorch's generic deserializer for PrivateUse1 copies
that storage to the device with ``storage.to(device)``, a fresh storage that
*can* grow, and ``set_`` then grew it with zeros and loaded the lie. This
deserializer, registered ahead of the generic one, restores musa locations the
same way and hands back a fixed-size view of the copy (a DLPack import: the same
memory, kept alive by the copy, not resizable), so the rebuild refuses as on the
CPU.
"""
from __future__ import annotations

import re

import torch
import torch.serialization as _serialization

# Before PyTorch's own PrivateUse1 entry (priority 23); priorities must differ (they are sorted
# as tuples with the functions), and only musa locations stop here.
_PRIORITY = 15


def _musa_location(location: str) -> bool:
    return isinstance(location, str) and bool(re.match(r"musa(:|[0-9]+|$)", location))


def fixed_size(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """A storage over ``storage``'s memory that cannot be resized."""
    whole = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    return torch.from_dlpack(whole).untyped_storage()


def _restore(obj, location: str):
    if not _musa_location(location):
        return None
    restored = _serialization._deserialize("privateuse1", obj, location)  # checks the device index
    if isinstance(restored, torch.UntypedStorage):
        return fixed_size(restored)
    if isinstance(restored, torch.storage.TypedStorage):
        return torch.storage.TypedStorage(wrap_storage=fixed_size(restored._untyped_storage),
                                          dtype=restored.dtype, _internal=True)
    return restored


def _tag(obj):
    return None  # PyTorch's PrivateUse1 tagger names musa storages ("musa:0")


# Ahead of PyTorch's CUDA entry (priority 20), for cuda locations only.
_CUDA_PRIORITY = 16


def _refuse_cuda_without_cuda(obj, location: str):
    """A cuda storage on a machine without CUDA: the real torch_musa's message, which
    names musa as the place to map it (PyTorch's names only the CPU)."""
    if isinstance(location, str) and location.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. "
            "If you are running on a MUSA enabled machine, please use torch.load with "
            "map_location=torch.device('musa') or map_location=torch.device('cpu') "
            "to map your storages to the MUSA or CPU.")
    return None


def install() -> None:
    _serialization.register_package(_PRIORITY, _tag, _restore)
    _serialization.register_package(_CUDA_PRIORITY, _tag, _refuse_cuda_without_cuda)

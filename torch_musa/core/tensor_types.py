"""Legacy type names (torch.musa.FloatTensor, ..., torch.musa.FloatStorage, ...), as
torch.cuda has them."""
from __future__ import annotations

import sys
import types

import torch
from torch._utils import classproperty
from torch.storage import _LegacyStorage, _warn_typed_storage_removal

_TYPES = {
    "DoubleTensor": torch.float64, "FloatTensor": torch.float32,
    "HalfTensor": torch.float16, "BFloat16Tensor": torch.bfloat16,
    "LongTensor": torch.int64, "IntTensor": torch.int32, "ShortTensor": torch.int16,
    "CharTensor": torch.int8, "ByteTensor": torch.uint8, "BoolTensor": torch.bool,
}


class _LegacyTensorType(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Tensor) and obj.device.type == "musa" and obj.dtype == cls.dtype

    def __call__(cls, *args, **kwargs):
        """Uninitialised by sizes, or from data, on the current musa device."""
        device = kwargs.pop("device", "musa")
        if len(args) == 1 and not isinstance(args[0], int):
            return torch.tensor(args[0], dtype=cls.dtype, device=device)
        return torch.empty(*args, dtype=cls.dtype, device=device, **kwargs)


def make_types() -> dict[str, type]:
    return {name: _LegacyTensorType(name, (), {"dtype": dtype, "is_musa": True})
            for name, dtype in _TYPES.items()}


_STORAGES = {
    "DoubleStorage": torch.float64, "FloatStorage": torch.float32, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool, "ComplexDoubleStorage": torch.complex128,
    "ComplexFloatStorage": torch.complex64,
}


class _MusaLegacyStorage(_LegacyStorage):
    """A typed storage on musa (torch.cuda's legacy storage classes' twin). Its module is
    ``torch.musa``, which is how TypedStorage places it on the musa device and how
    ``storage.type()`` of a musa tensor names it."""

    @classmethod
    def from_buffer(cls, *args, **kwargs):
        _warn_typed_storage_removal()
        raise RuntimeError("from_buffer: Not available for musa storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError("_new_with_weak_ptr: Not available for musa storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError("_new_shared_filename: Not available for musa storage")


def _storage_class(name: str, dtype: torch.dtype) -> type:
    def _dtype(cls):
        return dtype

    def public_dtype(cls):
        _warn_typed_storage_removal()
        return cls._dtype

    return type(_MusaLegacyStorage)(name, (_MusaLegacyStorage,), {
        "__module__": "torch.musa", "__qualname__": name,
        "_dtype": classproperty(_dtype), "dtype": classproperty(public_dtype)})


def make_storages() -> dict[str, type]:
    """The storage classes, registered with torch (``torch.is_storage`` knows them)."""
    out = {name: _storage_class(name, dtype) for name, dtype in _STORAGES.items()}
    for cls in out.values():
        torch._storage_classes.add(cls)
    return out


class _LegacySparseType(type):
    """torch.cuda.sparse.FloatTensor's musa twin: sparse COO tensors of one dtype on musa."""

    def __instancecheck__(cls, obj) -> bool:
        return (isinstance(obj, torch.Tensor) and obj.layout == torch.sparse_coo
                and obj.device.type == "musa" and obj.dtype == cls.dtype)

    def __call__(cls, *args, device="musa"):
        """``(indices, values[, size])`` as torch.sparse_coo_tensor, or ``(*sizes)`` for an
        empty one, on the current musa device."""
        if args and isinstance(args[0], torch.Tensor):
            if len(args) not in (2, 3):
                raise TypeError(f"torch.musa.sparse.{cls.__name__}(indices, values[, size]): "
                                f"got {len(args)} tensors/arguments")
            return torch.sparse_coo_tensor(*args, dtype=cls.dtype, device=device)
        return torch.sparse_coo_tensor(torch.empty((len(args), 0), dtype=torch.int64),
                                       torch.empty(0, dtype=cls.dtype), args, device=device)


def make_sparse_module(name: str) -> types.ModuleType:
    """``torch.musa.sparse``: the legacy sparse type names, the nine torch.sparse has (the
    dense ones but BoolTensor)."""
    mod = types.ModuleType(name, "Legacy sparse COO tensor types on musa (torch.cuda.sparse's).")
    for type_name, dtype in _TYPES.items():
        if type_name == "BoolTensor":
            continue
        setattr(mod, type_name, _LegacySparseType(type_name, (), {"dtype": dtype, "is_musa": True,
                                                                  "is_sparse": True}))
    sys.modules[name] = mod  # importable, as torch.cuda.sparse is
    return mod

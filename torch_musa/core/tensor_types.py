"""Legacy type names (torch.musa.FloatTensor, ..., torch.musa.FloatStorage, ...), as
torch.cuda has them, and ``torch.set_default_tensor_type`` taking the musa ones."""
from __future__ import annotations

import ctypes
import sys
import threading
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


def _legacy_class(meta: type, module: str, name: str, ns: dict) -> type:
    """A legacy type named as torch names its own: ``repr`` and pickling read
    ``torch.musa.FloatTensor`` (``__module__`` + ``__qualname__``), and the C-level type
    name, which ``Tensor.type(cls)`` parses as ``Tensor.type("torch.musa.FloatTensor")``,
    is the full dotted name (a class's ``__name__`` is its C-level name)."""
    return meta(f"{module}.{name}", (), {**ns, "__module__": module, "__qualname__": name})


def make_types() -> dict[str, type]:
    """The dense legacy types; also makes ``torch.set_default_tensor_type`` take the
    floating-point ones (``_install_default_tensor_type``)."""
    out = {name: _legacy_class(_LegacyTensorType, "torch.musa", name,
                               {"dtype": dtype, "is_musa": True})
           for name, dtype in _TYPES.items()}
    _install_default_tensor_type(out.values())
    _install_type_strings()
    return out


# ---------------------------------------------------------------------------
# "torch_musa.FloatTensor": the real torch_musa patches torch's type-string parser
# (torch/csrc/utils/tensor_types.cpp, options_from_string) so that a name under
# "torch_musa." reads as the same name under "torch.musa." (sparse ones too), while
# the names torch prints stay "torch.musa.*". torch's parser is C++; here the two
# Python entry points that hand it a string, Tensor.type and
# torch.set_default_tensor_type, translate the prefix first.
# ---------------------------------------------------------------------------

_ALIAS_PREFIX, _PREFIX = "torch_musa.", "torch.musa."


def musa_type_name(name):
    """``"torch_musa.X"`` as ``"torch.musa.X"``; anything else unchanged."""
    if isinstance(name, str) and name.startswith(_ALIAS_PREFIX):
        return _PREFIX + name[len(_ALIAS_PREFIX):]
    return name


def _install_type_strings() -> None:
    orig = torch._C.TensorBase.type

    def type(self, *args, **kwargs):  # noqa: A001  (Tensor.type, as torch names it)
        if args:
            args = (musa_type_name(args[0]), *args[1:])
        elif "dtype" in kwargs:
            kwargs["dtype"] = musa_type_name(kwargs["dtype"])
        return orig(self, *args, **kwargs)

    type.__doc__ = orig.__doc__
    type.__wrapped__ = orig
    torch.Tensor.type = type


# ---------------------------------------------------------------------------
# torch.set_default_tensor_type(torch.musa.FloatTensor)
#
# What torch.set_default_tensor_type(torch.cuda.FloatTensor) does is all C++
# (torch/csrc/tensor/python_tensor.cpp): it sets the default dtype, torch.Storage
# (torch.cuda.FloatStorage), and a static "default backend" that the legacy
# constructor torch.Tensor(...), torch.tensor/as_tensor and every factory without a
# device (torch.empty, randn, zeros, ... and so nn.Module parameters) read. That
# function accepts only the legacy type objects torch made at start-up: it checks the
# object's identity against a fixed list (torch.utils all_declared_types: CPU, CUDA,
# SparseCPU, SparseCUDA); torch has no way to register PrivateUse1 ones, so any
# torch.musa.*Tensor object (or a C++ one a plugin made) is an "invalid type object",
# and the default backend has no other setter. set_default_dtype + set_default_device
# is not the same: torch.Tensor(2, 3) ignores the default device.
#
# So the musa types are served through their CPU twins: for the duration of the call,
# the CPU twin's type object (torch.FloatTensor for torch.musa.FloatTensor) reads
# backend PrivateUse1, and torch's own function runs on it: its checks (floating point
# only, with the same TypeError as torch.LongTensor's), its deprecation warning, the
# default dtype, torch.Storage = torch.musa.FloatStorage (its module for PrivateUse1
# is torch.<backend name>) and the default backend are exactly those of CUDA's path.
# The layout of that type object is checked against the objects before it is written.
# Calls are serialised; another thread that uses the CPU twin itself (torch.FloatTensor(2),
# isinstance(x, torch.FloatTensor)) during those few microseconds would see musa.
# ---------------------------------------------------------------------------

# c10::Backend::PrivateUse1 in torch 2.13 (c10/core/Backend.h; a test pins it).
_BACKEND_PRIVATEUSE1 = 36
_BACKEND_CPU = 0
_default_type_lock = threading.Lock()
_backend_offsets: dict[type, int] = {}


def _backend_offset(cpu_type: type) -> int:
    """Where ``int backend`` lies in a torch legacy type object (``PyTensorType``:
    a PyTypeObject, then ``THPDtype* dtype; THPLayout* layout; bool is_cuda, is_xpu;
    char name[64]; int backend; int scalar_type``), checked field by field."""
    off = _backend_offsets.get(cpu_type)
    if off is not None:
        return off
    base = type(cpu_type).__basicsize__              # sizeof(PyTypeObject)
    ptr = ctypes.sizeof(ctypes.c_void_p)
    name_at = base + 2 * ptr + 2
    off = (name_at + 64 + 3) // 4 * 4
    addr = id(cpu_type)
    name = f"{cpu_type.__module__}.{cpu_type.__name__}".encode()
    ok = (cpu_type.__basicsize__ >= off + 8
          and ctypes.c_void_p.from_address(addr + base).value == id(cpu_type.dtype)
          and ctypes.c_void_p.from_address(addr + base + ptr).value == id(cpu_type.layout)
          and ctypes.string_at(addr + name_at, len(name) + 1) == name + b"\0"
          and ctypes.c_int.from_address(addr + off).value == _BACKEND_CPU)
    if not ok:
        raise TypeError(f"torch.set_default_tensor_type: this torch's legacy type objects "
                        f"({cpu_type!r}) are not laid out as torch 2.13's; use "
                        f"torch.set_default_dtype() and torch.set_default_device('musa')")
    _backend_offsets[cpu_type] = off
    return off


def _cpu_twin(musa_type: type) -> type:
    """torch's own legacy type of the same dtype (torch.FloatTensor for torch.musa's)."""
    for cls in torch._tensor_classes:
        if cls.__module__ == "torch" and cls.__name__ == musa_type.__qualname__:
            return cls
    raise TypeError(f"invalid type object: {musa_type!r}")


def _install_default_tensor_type(musa_types) -> None:
    """Route ``torch._C._set_default_tensor_type`` (what ``torch.set_default_tensor_type``
    calls, with a type or the name of one) for the musa legacy types; others go to
    torch's unchanged."""
    musa_types = {id(cls): cls for cls in musa_types}
    orig = torch._C._set_default_tensor_type
    if getattr(orig, "_musa_default_type", False):
        orig = orig.__wrapped__

    def _set_default_tensor_type(t):
        t = musa_type_name(t)
        if musa_types.get(id(t)) is not t:
            return orig(t)
        cpu = _cpu_twin(t)
        if not t.dtype.is_floating_point:
            return orig(cpu)      # the CPU's TypeError (and its deprecation warning)
        backend = ctypes.c_int.from_address(id(cpu) + _backend_offset(cpu))
        with _default_type_lock:
            backend.value = _BACKEND_PRIVATEUSE1
            try:
                orig(cpu)
            finally:
                backend.value = _BACKEND_CPU
        if torch.device(torch._C._get_default_device()).type != "musa":
            orig(torch.FloatTensor)
            raise TypeError(f"torch.set_default_tensor_type({t!r}) did not reach the musa "
                            f"backend (c10::Backend::PrivateUse1 is not "
                            f"{_BACKEND_PRIVATEUSE1} in this torch)")

    _set_default_tensor_type.__wrapped__ = orig
    _set_default_tensor_type._musa_default_type = True
    _set_default_tensor_type.__doc__ = orig.__doc__
    torch._C._set_default_tensor_type = _set_default_tensor_type


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
                raise TypeError(f"{cls.__module__}.{cls.__qualname__}(indices, values[, size]): "
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
        setattr(mod, type_name, _legacy_class(_LegacySparseType, "torch.musa.sparse", type_name,
                                              {"dtype": dtype, "is_musa": True, "is_sparse": True}))
    # importable, as torch.cuda.sparse is (also by the name its types give, for pickle)
    sys.modules[name] = sys.modules.setdefault("torch.musa.sparse", mod)
    return mod

"""Autocast kernels for the ``AutocastPrivateUse1`` dispatch key.

PyTorch ships per-op autocast kernels for CUDA, CPU, XPU, MPS, ... but none for
PrivateUse1, and no fallthrough either: without this module any op in a
``torch.autocast("musa")`` region fails. ``install()`` registers

* a fallthrough for every op (ops outside the policy run in their input dtype);
* for every op in :mod:`torch_musa.amp.policy` a Python kernel that casts the
  musa floating-point inputs as CUDA autocast does (lower precision, float32,
  float32 through ``dtype=``, widest type), then calls the op with the
  autocast key excluded.

The cast cache follows CUDA's rule (float32 leaf tensors that require grad,
cast to the lower precision, while ``torch.is_autocast_cache_enabled()``) and
is dropped when the outermost autocast region exits
(``torch.clear_autocast_cache``).
"""
from __future__ import annotations

import weakref

import torch

from torch_musa.amp import policy
from torch_musa.config import CONFIG

KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_libs: list = []
_cache: dict[int, tuple] = {}
_installed = False
_registered_ops: dict[str, str] = {}


_DEVICE_TYPE: str | None = None


def _device_type() -> str:
    global _DEVICE_TYPE
    if _DEVICE_TYPE is None:
        _DEVICE_TYPE = torch._C._get_privateuse1_backend_name()
    return _DEVICE_TYPE


def _check_dtype(dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16:
        p = CONFIG.profile
        if not p.supports_bf16:
            raise RuntimeError(
                f"musa autocast: bfloat16 is not supported by the hardware profile {p.name} "
                f"(MUSA arch {p.major}.{p.minor}; bfloat16 needs arch >= 2.2). "
                "Use dtype=torch.float16."
            )


def _eligible(t, dev: str) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.is_floating_point()
        and t.device.type == dev
        and t.dtype is not torch.float64
    )


def clear_cache() -> None:
    _cache.clear()


def _cached_cast(t: torch.Tensor, dtype: torch.dtype, dev: str):
    tdtype = t.dtype
    if tdtype == dtype or not t.is_floating_point() or tdtype is torch.float64 or t.device.type != dev:
        return t
    can_cache = (
        dtype is not torch.float32
        and tdtype is torch.float32
        and t.requires_grad
        and t.is_leaf
        and not t._is_view()
        and torch.is_autocast_cache_enabled()
    )
    if not can_cache:
        return t.to(dtype)
    # Keyed on the tensor alone, as at::autocast::cached_cast is on the CPU and
    # CUDA: a weight updated in place inside the region keeps its first cast
    # until the outermost region exits, so a loop kept inside one region trains
    # as it does there.
    key = id(t)
    hit = _cache.get(key)
    if hit is not None:
        ref, cdtype, casted = hit
        if ref() is t and cdtype == dtype:
            return casted
    casted = t.to(dtype)
    _cache[key] = (weakref.ref(t), dtype, casted)
    return casted


def _cast(value, dtype, dev):
    if isinstance(value, torch.Tensor):
        return _cached_cast(value, dtype, dev)
    if isinstance(value, (list, tuple)):
        return type(value)([_cast(v, dtype, dev) for v in value])
    return value


def _cast_args(args, dtype, dev):
    return [_cached_cast(a, dtype, dev) if isinstance(a, torch.Tensor) else _cast(a, dtype, dev)
            for a in args]


def _tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _lower_precision_kernel(op):
    def kernel(*args, **kwargs):
        dev = _device_type()
        dtype = torch.get_autocast_dtype(dev)
        if dtype is torch.bfloat16:
            _check_dtype(dtype)
        args = _cast_args(args, dtype, dev)
        if kwargs:
            kwargs = {k: _cast(v, dtype, dev) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return kernel


def _fp32_kernel(op):
    def kernel(*args, **kwargs):
        dev = _device_type()
        args = _cast_args(args, torch.float32, dev)
        if kwargs:
            kwargs = {k: _cast(v, torch.float32, dev) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return kernel


def _dtype_position(op) -> int:
    for i, a in enumerate(op._schema.arguments):
        if a.name == "dtype":
            return -1 if a.kwarg_only else i
    raise ValueError(f"{op} has no dtype argument")


def _fp32_set_opt_dtype_kernel(op):
    pos = _dtype_position(op)

    def kernel(*args, **kwargs):
        dev = _device_type()
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if args and _eligible(args[0], dev):
                if 0 <= pos < len(args):
                    if args[pos] is None:
                        args = args[:pos] + (torch.float32,) + args[pos + 1:]
                elif kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
            return op(*args, **kwargs)

    return kernel


def _fp32_append_dtype_kernel(op, target):
    def kernel(*args, **kwargs):
        dev = _device_type()
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if args and _eligible(args[0], dev):
                return target(*args, **kwargs, dtype=torch.float32)
            return op(*args, **kwargs)

    return kernel


def _promote_kernel(op):
    def kernel(*args, **kwargs):
        dev = _device_type()
        dtype = torch.get_autocast_dtype(dev)
        for t in _tensors(list(args) + list(kwargs.values())):
            if _eligible(t, dev) and t.dtype != dtype:
                dtype = torch.float32
                break
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, dtype, dev), **{k: _cast(v, dtype, dev) for k, v in kwargs.items()})

    return kernel


def _banned_kernel(message):
    def kernel(*args, **kwargs):
        raise RuntimeError(message)

    return kernel


def _resolve(name: str):
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    try:
        return getattr(packet, overload or "default")
    except AttributeError:
        return None


def _wrap_clear_autocast_cache() -> None:
    original = torch.clear_autocast_cache
    if getattr(original, "_musa_wrapped", False):
        return

    def clear_autocast_cache():
        _cache.clear()
        return original()

    clear_autocast_cache._musa_wrapped = True
    clear_autocast_cache.__doc__ = original.__doc__
    torch.clear_autocast_cache = clear_autocast_cache


def install() -> None:
    """Register the fallthrough and the per-op kernels (idempotent)."""
    global _installed
    if _installed:
        return
    fallback = torch.library.Library("_", "IMPL")
    try:
        fallback.fallback(torch.library.fallthrough_kernel, KEY)
    except RuntimeError as e:  # a fallback for the key exists already (e.g. from C++): keep it
        if "multiple" not in str(e).lower():
            raise
    lib = torch.library.Library("aten", "IMPL")
    _libs.extend([fallback, lib])

    def register(name, make, policy_name):
        op = _resolve(name)
        if op is None:
            return
        qualified = name if "." in name else name + ".default"
        lib.impl(name, make(op), KEY)
        _registered_ops[qualified] = policy_name

    for name in policy.LOWER_PRECISION:
        register(name, _lower_precision_kernel, "lower_precision")
    for name in policy.FP32:
        register(name, _fp32_kernel, "fp32")
    for name in policy.FP32_SET_OPT_DTYPE:
        register(name, _fp32_set_opt_dtype_kernel, "fp32_set_opt_dtype")
    for name, target in policy.FP32_APPEND_DTYPE.items():
        t = _resolve(target)
        if t is not None:
            register(name, lambda op, t=t: _fp32_append_dtype_kernel(op, t), "fp32_append_dtype")
    for name in policy.PROMOTE:
        register(name, _promote_kernel, "promote")
    for name, message in policy.BANNED.items():
        register(name, lambda op, m=message: _banned_kernel(m), "banned")
    _wrap_clear_autocast_cache()
    _installed = True


def registered_ops() -> dict[str, str]:
    """``{"op.overload": policy}`` for every op with a musa autocast kernel."""
    return dict(_registered_ops)

"""Run unmodified CUDA PyTorch scripts on musa.

    import torch_musa.cuda_compat      # first thing in the script, or:
    TORCH_MUSA_CUDA_COMPAT=1 python train.py   (with PyTorch's backend autoload)

What it does (``enable()``; ``disable()`` undoes it):

* ``torch.cuda.*`` answers from ``torch.musa`` (``is_available``,
  ``device_count``, ``set_device``, memory, seeds, streams, events, ...).
* ``"cuda"`` / ``"cuda:N"`` / ``torch.device("cuda")`` given as a device to
  factories (``torch.randn(..., device="cuda")``), ``Tensor.to``,
  ``Tensor.cuda()``, ``Module.to`` / ``Module.cuda()``, ``torch.load(map_location=...)``
  (also checkpoints saved on CUDA, loaded without ``map_location``),
  ``torch.Generator``, ``torch.set_default_device``, ``torch.autocast`` /
  ``torch.cuda.amp.autocast`` and ``GradScaler`` go to musa.
* Every device argument of ``torch.cuda.*`` (``Stream``, ``ExternalStream``,
  ``device``, ``set_device``, ``synchronize``, ``current_stream``, memory,
  ``get_device_properties``, ...) takes ``"cuda"``, ``"cuda:N"``,
  ``torch.device("cuda", N)`` and ints, as CUDA's do; so do ``torch.Stream``,
  ``torch.Event`` and ``torch.accelerator.*``.
* ``nn.DataParallel`` runs over the musa devices (its replica threads
  translate ``"cuda"`` too).
* ``torch.version.cuda`` names a CUDA release (``_patch_version`` says why), so
  PyTorch does not take the device for ROCm.
* ``init_process_group("nccl")`` (and ``"cpu:gloo,cuda:nccl"``) uses ``mccl``.
* ``CUDA_VISIBLE_DEVICES`` (and the other CUDA variables of the mapping
  table) is honoured when the MUSA name is unset.

It cannot cover what ``limitations()`` lists (``tensor.device.type == "cuda"``
is False, ``tensor.is_cuda`` is False, ...): that list lives in the mapping
table shared with ``musa-converter``, whose report flags the same call sites.
"""
from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import types
import warnings

import torch

from torch_musa._table import render
from torch_musa.config import CONFIG
from torch_musa.config.variables import VARIABLES, from_cuda_names, visible_devices
from torch_musa.cuda_mapping import load_table, review_items

# The module, not the ``device`` class that torch_musa.core exports under its name.
_musa_device = importlib.import_module("torch_musa.core.device")
_comm = importlib.import_module("torch_musa.core.comm")
_torch_utils = importlib.import_module("torch._utils")
_accelerator_utils = importlib.import_module("torch.accelerator._utils")

__all__ = ["enable", "disable", "is_enabled", "maybe_enable_from_env", "limitations",
           "apply_env_aliases", "ENV_VAR"]

ENV_VAR = "TORCH_MUSA_CUDA_COMPAT"

_lock = threading.Lock()
_state: dict = {"enabled": False, "saved": [], "mode": None}


# ---------------------------------------------------------------------------
# Translation helpers
# ---------------------------------------------------------------------------

def _table():
    return load_table()


def _dev_type(t):
    if isinstance(t, str):
        return _table().devices.get(t, t)
    return t


def _dev(d):
    """A device argument with ``cuda`` replaced by ``musa`` (index kept)."""
    if isinstance(d, str):
        head, sep, tail = d.partition(":")
        new = _table().devices.get(head)
        return new + sep + tail if new else d
    if isinstance(d, torch.device) and d.type in _table().devices:
        return torch.device(_table().devices[d.type], d.index)
    return d


def _backend(b):
    if not isinstance(b, str):
        return b
    table = _table()
    if ":" in b or "," in b:     # "cpu:gloo,cuda:nccl"
        parts = []
        for item in b.split(","):
            dev, sep, name = item.partition(":")
            if sep:
                parts.append(f"{table.devices.get(dev.strip(), dev.strip())}:"
                             f"{table.backends.get(name.strip(), name.strip())}")
            else:
                parts.append(table.backends.get(item.strip(), item.strip()))
        return ",".join(parts)
    return table.backends.get(b, b)


def _translate_args(args, kwargs):
    args = tuple(_dev(a) if isinstance(a, (str, torch.device)) else a for a in args)
    if kwargs:
        kwargs = {k: (_dev(v) if k in ("device", "map_location", "device_type") else v)
                  for k, v in kwargs.items()}
    return args, kwargs


def _current_musa():
    return torch.device("musa", torch.musa.current_device())


# ---------------------------------------------------------------------------
# Device arguments everywhere: a TorchFunctionMode
# ---------------------------------------------------------------------------

_TO = {torch.Tensor.to}
_CUDA = {torch.Tensor.cuda}


class _CudaToMusa(torch.overrides.TorchFunctionMode):
    """Rewrites ``device=`` keyword arguments and ``.to``/``.cuda`` targets."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CUDA:
            return _tensor_cuda(*args, **kwargs)
        dev = kwargs.get("device")
        if dev is not None and isinstance(dev, (str, torch.device)):
            kwargs = dict(kwargs, device=_dev(dev))
        if func in _TO and len(args) > 1:
            args = (args[0],) + tuple(_dev(a) if isinstance(a, (str, torch.device)) else a
                                      for a in args[1:])
        return func(*args, **kwargs)


def _tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    if device is None:
        device = _current_musa()
    elif isinstance(device, int):
        device = torch.device("musa", device)
    else:
        device = _dev(device)
    return self.to(device, non_blocking=non_blocking, memory_format=memory_format)


# ---------------------------------------------------------------------------
# Patching
# ---------------------------------------------------------------------------

def _set(obj, name, value):
    missing = object()
    old = getattr(obj, name, missing)
    _state["saved"].append((obj, name, old, missing))
    setattr(obj, name, value)


def _wrap_device_fn(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args, kwargs = _translate_args(args, kwargs)
        return fn(*args, **kwargs)
    wrapper.__wrapped_cuda_compat__ = True
    return wrapper


def _device_less_means_musa(fn, device_less_arity):
    wrapped = _wrap_device_fn(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not kwargs and len(args) == device_less_arity:
            args = ("musa", *args)
        return wrapped(*args, **kwargs)
    wrapper.__wrapped_cuda_compat__ = True
    return wrapper


# Classes go across as they are (isinstance and subclassing keep working): their
# device arguments take CUDA's spellings through the alias set in _patch_torch_cuda.
_KEEP_CLASSES = {"Stream", "Event", "ExternalStream", "StreamContext", "OutOfMemoryError",
                 "device", "device_of"}


def _patch_torch_cuda():
    musa = torch.musa
    # Every torch.musa device argument is read by one function; it takes "cuda",
    # "cuda:N" and torch.device("cuda", N) while the layer is on (also as keyword
    # arguments of any name, and inside the classes above).
    _set(_musa_device, "_ALIASES", frozenset(
        cuda for cuda, target in _table().devices.items() if target == "musa"))
    for name in dir(musa):
        if name.startswith("_") or not hasattr(torch.cuda, name):
            continue
        value = getattr(musa, name)
        if isinstance(value, type(os)):
            continue
        if name in _KEEP_CLASSES or not callable(value) or isinstance(value, type) and \
                name.endswith("Tensor"):
            _set(torch.cuda, name, value)
        else:
            _set(torch.cuda, name, _wrap_device_fn(value))
    # torch.musa serves it from a module __getattr__, which dir() does not list.
    _set(torch.cuda, "default_generators", torch.musa.default_generators)
    # A few names torch.musa spells differently or does not need.
    _set(torch.cuda, "is_available", lambda: torch.musa.is_available())
    _set(torch.cuda, "_lazy_init", lambda: torch.musa._lazy_init())
    _set(torch.cuda, "is_initialized", lambda: torch.musa.is_initialized())
    _set(torch.cuda, "CUDAGraph", torch.musa.MUSAGraph)


# What torch.version.cuda reads under the layer when torch itself has no CUDA.
CUDA_VERSION = "12.8"


def _patch_version():
    """``torch.version.cuda`` names a CUDA release (``torch.version.hip`` is None).

    PyTorch tells its two GPU builds apart by these strings: with
    ``torch.cuda.is_available()`` true, ``torch.version.cuda is None`` means ROCm,
    and then it reads ROCm-only things (inductor's cache key takes
    ``gcnArchName`` for a ``gfx`` target, HIP compilers, AMD wave sizes). Under
    this layer the device plays CUDA's part, so the CUDA answer must be non-None.
    Which release it names matters only to code that compiles CUDA sources
    (nvcc, NVRTC, ``cpp_extension``), which cannot run on musa whatever it reads;
    libraries that gate features on an old toolkit (bf16 before CUDA 11, ...)
    must see a current one, hence a CUDA 12 release. A torch built with CUDA
    (the cuda driver's) keeps its own string; ``disable()`` restores None.
    """
    if torch.version.cuda is None:
        _set(torch.version, "cuda", CUDA_VERSION)


def _patch_nvtx():
    """NVTX annotations are no-ops (the CPU build of PyTorch raises on them)."""
    import contextlib
    import torch.cuda.nvtx as nvtx
    if getattr(torch._C, "_nvtx", None) is not None:
        return
    _set(nvtx, "range_push", lambda msg: 0)
    _set(nvtx, "range_pop", lambda: 0)
    _set(nvtx, "range_start", lambda msg: 0)
    _set(nvtx, "range_end", lambda range_id: None)
    _set(nvtx, "mark", lambda msg: None)
    _set(nvtx, "range", lambda msg, *a, **k: contextlib.nullcontext())


def _set_everywhere(module, name, value):
    """``module.name = value``, and in every loaded torch module that holds the same
    object under that name (``from module import name`` copied it)."""
    orig = getattr(module, name)
    for mod_name, mod in list(sys.modules.items()):
        if (mod_name == "torch" or mod_name.startswith("torch.")) \
                and getattr(mod, "__dict__", {}).get(name) is orig:
            _set(mod, name, value)


def _patch_device_type():
    """DataParallel and torch._utils' device helpers take the musa device.

    ``torch._utils._get_available_device_type`` asks ``torch.cuda.is_available()``
    first, which the layer makes true: DataParallel then wanted its module on
    cuda:0 while ``.cuda()`` had put it on musa:0, and its default device ids and
    current-device answers would be read from the torch.cuda mirror by name. While
    the layer is on the answer is musa's (functions already imported elsewhere
    ask the layer, so they answer torch's again after ``disable()``).
    """
    orig = _torch_utils._get_available_device_type

    def _get_available_device_type():
        if _state["enabled"] and torch.musa.is_available():
            return torch._C._get_privateuse1_backend_name()
        return orig()
    _set_everywhere(_torch_utils, "_get_available_device_type", _get_available_device_type)


def _patch_accelerator():
    """``torch.accelerator``'s device arguments take CUDA's spellings.

    All of them go through ``torch.accelerator._utils._get_device_index``, which
    rejects a device whose type is not the accelerator's ("cuda doesn't match the
    current accelerator musa").
    """
    orig = _accelerator_utils._get_device_index

    @functools.wraps(orig)
    def _get_device_index(device, optional=False):
        return orig(_dev(device), optional)
    _set_everywhere(_accelerator_utils, "_get_device_index", _get_device_index)


def _compat_mode_for_workers():
    """parallel_apply's replica threads run under the device translation (a
    TorchFunctionMode is per thread: ``torch.zeros(..., device="cuda")`` in a
    replica's forward failed)."""
    return _CudaToMusa if _state["enabled"] else None


class _Autocast(torch.amp.autocast_mode.autocast):
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        super().__init__(_dev_type(device_type), dtype=dtype, enabled=enabled,
                         cache_enabled=cache_enabled)


class _CudaAmpAutocast(torch.amp.autocast_mode.autocast):
    def __init__(self, enabled=True, dtype=torch.float16, cache_enabled=True):
        super().__init__("musa", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class _GradScaler(torch.amp.grad_scaler.GradScaler):
    def __init__(self, device="cuda", *args, **kwargs):
        super().__init__(_dev_type(device), *args, **kwargs)


class _CudaAmpGradScaler(torch.amp.grad_scaler.GradScaler):
    def __init__(self, *args, **kwargs):
        super().__init__("musa", *args, **kwargs)


def _patch_amp():
    _set(torch, "autocast", _Autocast)
    _set(torch.amp, "autocast", _Autocast)
    _set(torch.amp, "GradScaler", _GradScaler)
    import torch.cuda.amp as cuda_amp
    _set(cuda_amp, "autocast", _CudaAmpAutocast)
    _set(cuda_amp, "GradScaler", _CudaAmpGradScaler)
    _set(cuda_amp, "custom_fwd", functools.partial(torch.amp.custom_fwd, device_type="musa"))
    _set(cuda_amp, "custom_bwd", functools.partial(torch.amp.custom_bwd, device_type="musa"))
    for name in ("get_autocast_dtype", "set_autocast_dtype"):
        fn = getattr(torch, name, None)
        if fn is not None:
            _set(torch, name, _wrap_device_fn(fn))
    # The device-less forms CUDA code still uses (is_autocast_enabled(),
    # set_autocast_enabled(flag), the *_gpu_dtype pair) ask about CUDA: musa here.
    for name, device_less_arity in (("is_autocast_enabled", 0), ("set_autocast_enabled", 1)):
        fn = getattr(torch, name, None)
        if fn is not None:
            _set(torch, name, _device_less_means_musa(fn, device_less_arity))
    _set(torch, "get_autocast_gpu_dtype", lambda: torch.get_autocast_dtype("musa"))
    _set(torch, "set_autocast_gpu_dtype", lambda dtype: torch.set_autocast_dtype("musa", dtype))
    for name in ("custom_fwd", "custom_bwd", "is_autocast_available"):
        fn = getattr(torch.amp, name, None)
        if fn is not None:
            _set(torch.amp, name, _wrap_device_fn(fn))


def _device_first(args, kwargs):
    """Constructor arguments with the device (first, or ``device=``) mapped."""
    if args:
        args = (_dev(args[0]),) + tuple(args[1:])
    if "device" in kwargs:
        kwargs = dict(kwargs, device=_dev(kwargs["device"]))
    return args, kwargs


class _DeviceClassMeta(type):
    """A stand-in for a C++ torch class whose constructor takes a device first.

    ``torch.Generator``, ``torch.Stream`` and ``torch.Event`` parse ``"cuda"`` in
    C++ (no TorchFunctionMode sees it) and their types are immutable, so while the
    layer is on the torch name is bound to a stand-in: calling it maps the device
    and builds the torch class; instances, isinstance/issubclass and class
    attributes are torch's. A class deriving from the stand-in derives from a
    subclass of the torch class whose ``__new__`` maps the device.
    """

    def __new__(mcls, name, bases, ns, **kwargs):
        if any(isinstance(b, mcls) for b in bases):
            real = tuple(b._base if isinstance(b, mcls) else b for b in bases)
            return types.new_class(name, real, kwargs, lambda body: body.update(ns))
        return super().__new__(mcls, name, bases, ns)

    def __call__(cls, *args, **kwargs):
        args, kwargs = _device_first(args, kwargs)
        return cls._orig(*args, **kwargs)

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._orig)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls._orig)

    def __getattr__(cls, name):
        return getattr(cls._orig, name)


def _stand_in(orig):
    def __new__(cls, *args, **kwargs):
        args, kwargs = _device_first(args, kwargs)
        return orig.__new__(cls, *args, **kwargs)

    base = type(orig)(orig.__name__, (orig,), {"__new__": __new__, "__module__": __name__})
    return _DeviceClassMeta(orig.__name__, (), {
        "_orig": orig, "_base": base, "__module__": orig.__module__,
        "__qualname__": orig.__qualname__, "__doc__": orig.__doc__})


_Generator, _Stream, _Event = (_stand_in(c) for c in (torch.Generator, torch.Stream, torch.Event))


def _map_location(ml):
    from torch.serialization import default_restore_location

    def restore_cuda(storage, location):
        if isinstance(location, str) and location.split(":")[0] in _table().devices:
            return default_restore_location(storage, _dev(location))
        return None

    if ml is None:
        return restore_cuda
    if isinstance(ml, (str, torch.device)):
        return _dev(ml)
    if isinstance(ml, dict):
        mapped = {k: _dev(v) for k, v in ml.items()}

        def restore_dict(storage, location):
            return default_restore_location(storage, _dev(mapped.get(location, location)))
        return restore_dict
    if callable(ml):
        def restore_user(storage, location):
            out = ml(storage, location)
            return out if out is not None else restore_cuda(storage, location)
        return restore_user
    return ml


def _patch_factories():
    _set(torch, "Generator", _Generator)
    _set(torch, "Stream", _Stream)
    _set(torch, "Event", _Event)
    orig_load = torch.load

    @functools.wraps(orig_load)
    def load(f, map_location=None, *args, **kwargs):
        return orig_load(f, _map_location(map_location), *args, **kwargs)
    _set(torch, "load", load)
    orig_default = torch.set_default_device

    @functools.wraps(orig_default)
    def set_default_device(device):
        return orig_default(_dev(device))
    _set(torch, "set_default_device", set_default_device)


def _patch_distributed():
    try:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
    except ImportError:
        return
    if not dist.is_available():
        return

    def check(backend):
        if isinstance(backend, str) and "mccl" in backend and \
                "mccl" not in dist.Backend.backend_list:
            raise RuntimeError(
                "torch_musa.cuda_compat: the script asks for NCCL, which maps to the 'mccl' "
                "backend, but this torch_musa does not register 'mccl' yet")
        return backend

    def wrap(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if args:
                args = (check(_backend(args[0])),) + tuple(args[1:])
            if "backend" in kwargs:
                kwargs["backend"] = check(_backend(kwargs["backend"]))
            return fn(*args, **kwargs)
        return wrapper

    for name in ("init_process_group",):
        orig = getattr(c10d, name)
        w = wrap(orig)
        _set(c10d, name, w)
        _set(dist, name, w)
    orig_new_group = c10d.new_group

    @functools.wraps(orig_new_group)
    def new_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _backend(kwargs["backend"])
        return orig_new_group(*args, **kwargs)
    _set(c10d, "new_group", new_group)
    _set(dist, "new_group", new_group)


def apply_env_aliases() -> list[str]:
    """Copy CUDA environment variables to their MUSA names where those are unset (the
    mapping table's ``env:`` section, as the configuration reads it: ``from_cuda_names``).

    Touches only ``os.environ``; safe to call before the runtime starts.
    Returns the MUSA names it set.
    """
    values, dropped = from_cuda_names(os.environ)
    if dropped:
        warnings.warn(f"torch_musa.cuda_compat: PYTORCH_CUDA_ALLOC_CONF options {dropped} have "
                      "no musa equivalent and are ignored", stacklevel=2)
    os.environ.update(values)
    return list(values)


def _check_visible_devices(set_names):
    if "MUSA_VISIBLE_DEVICES" not in set_names:
        return
    spec = VARIABLES["MUSA_VISIBLE_DEVICES"].read(os.environ)  # as apply_env_aliases set it
    if visible_devices(spec, CONFIG.profile.num_devices) != CONFIG.physical_indices:
        warnings.warn(
            "torch_musa.cuda_compat: CUDA_VISIBLE_DEVICES was read after the musa runtime "
            "started; it applies to child processes only. Set it with "
            f"{ENV_VAR}=1 or as MUSA_VISIBLE_DEVICES before importing torch.", stacklevel=3)


def enable() -> None:
    """Turn the compatibility layer on (idempotent) for this process.

    The device-argument translation is a TorchFunctionMode, which is per
    thread: call ``enable()`` again inside threads that create tensors
    (``nn.DataParallel``'s replica threads have it already).
    """
    with _lock:
        if _state["enabled"]:
            if not _mode_active():
                _push_mode()
            return
        set_names = apply_env_aliases()
        _patch_torch_cuda()
        _patch_version()
        _patch_nvtx()
        _patch_amp()
        _patch_factories()
        _patch_distributed()
        _patch_device_type()
        _patch_accelerator()
        _comm.add_worker_state(_compat_mode_for_workers)
        _push_mode()
        _state["enabled"] = True
    _check_visible_devices(set_names)


def _push_mode():
    mode = _CudaToMusa()
    mode.__enter__()
    _state["mode"] = mode
    _tls.mode = mode


_tls = threading.local()


def _mode_active() -> bool:
    return getattr(_tls, "mode", None) is not None


def disable() -> None:
    """Undo ``enable()`` (patched names restored, mode popped in this thread)."""
    with _lock:
        if not _state["enabled"]:
            return
        mode = getattr(_tls, "mode", None)
        if mode is not None:
            try:
                mode.__exit__(None, None, None)
            except Exception:
                pass
            _tls.mode = None
        for obj, name, old, missing in reversed(_state["saved"]):
            if old is missing:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
            else:
                setattr(obj, name, old)
        _state["saved"].clear()
        _comm.remove_worker_state(_compat_mode_for_workers)
        _state["enabled"] = False


def is_enabled() -> bool:
    return _state["enabled"]


def maybe_enable_from_env() -> bool:
    """Enable the layer when ``TORCH_MUSA_CUDA_COMPAT=1`` was set at import (torch_musa
    then calls this; the variable is read once, with the rest of the configuration)."""
    if CONFIG.cuda_compat:
        enable()
        return True
    return False


class Limitations(list):
    """``limitations()``'s answer: a list of dicts (``id``, ``title``, ``runtime``,
    ``converter``) that prints as a table of what each means at run time."""

    def __str__(self) -> str:
        return render(["id", "limitation", "under cuda_compat"],
                      [(d["id"], d["title"], d["runtime"]) for d in self], wrap=[None, 24, 52])


def limitations() -> Limitations:
    """What this layer cannot cover (shared with musa-converter's report);
    ``print(limitations())`` shows them as a table."""
    return Limitations({"id": i.id, "title": i.title, "runtime": i.runtime, "converter": i.converter}
                       for i in review_items())


# ``import torch_musa.cuda_compat`` turns it on, except while torch_musa itself
# is still importing (it then calls maybe_enable_from_env(), which decides).
# (The package is in sys.modules: importing this module imported it first.)
if not getattr(getattr(sys.modules.get("torch_musa"), "__spec__", None), "_initializing", False):
    enable()

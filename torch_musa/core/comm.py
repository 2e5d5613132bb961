"""``torch.musa.comm``: ``torch.cuda.comm``'s collectives between musa devices,
and the ``torch._C`` primitives that ``torch.nn.parallel`` (DataParallel) calls.

``torch.nn.parallel.comm`` calls ``torch._C._broadcast``, ``_scatter``,
``_gather`` and their ``_out``/``_coalesced`` forms, which PyTorch compiles only
into CUDA builds and which move data to CUDA devices. The primitives below are
the same operations over musa devices; ``install()`` adds them to ``torch._C``
where torch lacks them (the CPU build this plugin runs on). The public
functions call them directly, so ``torch.musa.comm`` means musa devices under
any build. Integers in ``devices``/``destination`` are musa indices, as they are
CUDA indices in ``torch.cuda.comm``.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import warnings
from collections.abc import Sequence

import torch
from torch._prims_common import suggest_memory_format
from torch._utils import (
    _flatten_dense_tensors,
    _handle_complex,
    _reorder_tensors_as,
    _take_tensors,
    _unflatten_dense_tensors,
)

from torch_musa.core.device import _get_device_index, current_device
from torch_musa.core.device import device as _device_guard

__all__ = ["broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather"]

_DEFAULT_BUFFER = 10485760
# By module path: torch.nn.parallel.parallel_apply is also the name of the function.
_parallel_apply_module = importlib.import_module("torch.nn.parallel.parallel_apply")
_data_parallel_module = importlib.import_module("torch.nn.parallel.data_parallel")


# ---- primitives: the signatures and checks of torch/csrc/cuda/python_comm.cpp ----

def _index(t: torch.Tensor) -> int:
    """The musa index a tensor lives on; -1 for any other device."""
    return t.device.index if t.device.type == "musa" else -1


def _musa(index: int) -> torch.device:
    if index < 0:
        raise RuntimeError(f"Expected non-negative device index, but got {index}")
    return torch.device("musa", index)


def _stream_ctx(streams, i: int, device_index: int):
    """The context running copy i on ``streams[i]``, after checking its device."""
    stream = streams[i] if streams is not None and i < len(streams) else None
    if stream is None:
        return contextlib.nullcontext()
    if stream.device_index != device_index:
        raise RuntimeError(f"Expected the device associated with the stream at index {i} (was "
                           f"{stream.device_index}) to match the device supplied at that index "
                           f"(expected {device_index})")
    return stream


def _check_musa_outputs(out: Sequence[torch.Tensor], what: str) -> None:
    for i, t in enumerate(out):
        if t.device.type != "musa":
            raise RuntimeError(f"Expected all {what} tensors to be musa tensors, but {what} tensor at "
                               f"index {i} has device '{t.device}'")


def _broadcast_out(tensor: torch.Tensor, out: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    _check_musa_outputs(out, "output")
    for i, t in enumerate(out):
        if t.shape != tensor.shape:
            raise RuntimeError(f"Expected all output tensors to have same shape as the source tensor "
                               f"{list(tensor.shape)}, but output tensor at index {i} has shape {list(t.shape)}")
    for t in out:
        t.copy_(tensor, non_blocking=True)
    return list(out)


def _broadcast(tensor: torch.Tensor, devices: Sequence[int]) -> list[torch.Tensor]:
    """A copy of ``tensor`` on each device; the tensor itself where it already is."""
    targets = [_musa(d) for d in devices]
    here = _index(tensor)
    copies = iter(_broadcast_out(tensor, [torch.empty(tensor.shape, dtype=tensor.dtype, device=t)
                                          for t in targets if t.index != here]))
    return [tensor if d == here else next(copies) for d in devices]


def _broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Sequence[int],
                         buffer_size: int) -> list[list[torch.Tensor]]:
    """Per device, copies of ``tensors`` (on devices[0]: the tensors themselves),
    moved in flat buffers of up to ``buffer_size`` bytes per dtype."""
    if not all(_index(t) == devices[0] for t in tensors):
        raise RuntimeError(f"All tensors must be on devices[0]: {devices[0]}")
    outputs: list[list[torch.Tensor]] = [list(tensors)] + [[] for _ in devices[1:]]
    with _device_guard(devices[0]):
        for chunk in _take_tensors(tensors, buffer_size):
            flat = _broadcast(_flatten_dense_tensors(chunk), devices)
            for i in range(1, len(devices)):
                with _device_guard(devices[i]):
                    # .data: separate version counters, not the flat buffer's shared one
                    # (an in-place update of one buffer must not invalidate the others).
                    outputs[i].extend(t.data for t in _unflatten_dense_tensors(flat[i], chunk))
    if len({t.type() for t in tensors}) > 1:
        outputs[1:] = [list(_reorder_tensors_as(o, tensors)) for o in outputs[1:]]
    return outputs


def _scatter(tensor: torch.Tensor, devices: Sequence[int], chunk_sizes: Sequence[int] | None, dim: int,
             streams) -> list[torch.Tensor]:
    if not devices:
        raise RuntimeError("Expected at least one device to scatter to")
    if chunk_sizes is not None and len(chunk_sizes) != len(devices):
        raise RuntimeError(f"Expected devices and chunk_sizes to be of same length, but got "
                           f"len(devices) = {len(devices)} and len(chunk_sizes) = {len(chunk_sizes)}")
    chunks = (tensor.split_with_sizes(list(chunk_sizes), dim) if chunk_sizes is not None
              else tensor.chunk(len(devices), dim))
    out = []
    for i, chunk in enumerate(chunks):  # tensor.chunk may give fewer chunks than devices
        if devices[i] != _index(tensor):
            target = _musa(devices[i])
            with _stream_ctx(streams, i, devices[i]):
                chunk = chunk.to(target, non_blocking=True, memory_format=torch.preserve_format)
        out.append(chunk)
    return out


def _scatter_out(tensor: torch.Tensor, out: Sequence[torch.Tensor], dim: int, streams) -> list[torch.Tensor]:
    if not out:
        raise RuntimeError("Expected at least one output tensor to scatter to")
    _check_musa_outputs(out, "output")
    dim = dim % tensor.dim() if tensor.dim() else 0
    sizes = []
    for i, t in enumerate(out):
        same = t.dim() == tensor.dim() and all(a == b for k, (a, b) in enumerate(zip(t.shape, tensor.shape))
                                               if k != dim)
        if not same:
            raise RuntimeError(f"Output tensor at index {i} has incorrect shape: {list(t.shape)}. Expected same "
                               f"shape except for scatter dim {dim} as the source tensor: {list(tensor.shape)}")
        sizes.append(t.size(dim))
    if sum(sizes) != tensor.size(dim):
        raise RuntimeError(f"Total size for output tensors along scatter dim {dim} does not match the source "
                           f"tensor size at dim {dim}. Expected {tensor.size(dim)}, but got total size {sum(sizes)}")
    for i, (t, chunk) in enumerate(zip(out, tensor.split_with_sizes(sizes, dim))):
        with _stream_ctx(streams, i, _index(t)):
            t.copy_(chunk, non_blocking=True)
    return list(out)


def _gather_shape(tensors: Sequence[torch.Tensor], dim: int) -> tuple[list[int], int]:
    """The concatenated shape (and the wrapped dim), after the input checks."""
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    _check_musa_outputs(tensors, "input")
    first = tensors[0]
    dim = dim % first.dim() if first.dim() else 0
    shape = list(first.shape)
    total = 0
    for i, t in enumerate(tensors):
        if t.dim() != first.dim():
            raise RuntimeError(f"Expected all input tensors to have the same number of dimensions, but tensor "
                               f"at index {i} has {t.dim()} dimensions, (expected {first.dim()})")
        shape[dim] = t.size(dim)
        if list(t.shape) != shape:
            raise RuntimeError(f"Input tensor at index {i} has invalid shape {list(t.shape)}, but expected {shape}")
        total += t.size(dim)
    shape[dim] = total
    return shape, dim


def _gather_into(tensors: Sequence[torch.Tensor], out: torch.Tensor, dim: int) -> torch.Tensor:
    parts = out.split_with_sizes([t.size(dim) for t in tensors], dim)
    for part, t in zip(parts, tensors):
        part.copy_(t, non_blocking=out.device.type == "musa")
    return out


def _gather(tensors: Sequence[torch.Tensor], dim: int, destination_index: int | None) -> torch.Tensor:
    """Concatenation on musa ``destination_index`` (None: the current device; -1: the CPU)."""
    shape, dim = _gather_shape(tensors, dim)
    formats = {suggest_memory_format(t) for t in tensors}
    memory_format = formats.pop() if len(formats) == 1 else torch.contiguous_format
    if destination_index == -1:
        device = torch.device("cpu")
    else:
        device = _musa(current_device() if destination_index is None else destination_index)
    out = torch.empty(shape, dtype=tensors[0].dtype, device=device, memory_format=memory_format)
    return _gather_into(tensors, out, dim)


def _gather_out(tensors: Sequence[torch.Tensor], out: torch.Tensor, dim: int) -> torch.Tensor:
    shape, dim = _gather_shape(tensors, dim)
    if list(out.shape) != shape:
        raise RuntimeError(f"Expected out tensor to have shape {shape}, but got {list(out.shape)}")
    return _gather_into(tensors, out, dim)


_PRIMITIVES = {
    "_broadcast": _broadcast,
    "_broadcast_out": _broadcast_out,
    "_broadcast_coalesced": _broadcast_coalesced,
    "_scatter": _scatter,
    "_scatter_out": _scatter_out,
    "_gather": _gather,
    "_gather_out": _gather_out,
}


def _musa_autocast():
    """The caller's musa autocast, to re-enter in each worker (None when off).

    torch's workers re-enter autocast with ``torch.is_autocast_enabled()``, which
    answers for CUDA only, so without this the replicas ran in float32 under
    ``torch.autocast("musa")``.
    """
    if not torch.is_autocast_enabled("musa"):
        return None
    settings = dict(dtype=torch.get_autocast_dtype("musa"), cache_enabled=torch.is_autocast_cache_enabled())
    return lambda: torch.autocast("musa", **settings)


# Per-thread state that parallel_apply's worker threads must share with the caller.
# Each entry runs in the caller's thread and returns None or a factory of a fresh
# context manager, entered around every replica's call.
_worker_state: list = [_musa_autocast]


def add_worker_state(capture) -> None:
    """Have ``parallel_apply``'s worker threads run under ``capture()``'s context.

    ``capture`` runs in the caller's thread at each call and returns None (nothing
    to carry over) or a zero-argument factory of a context manager; each worker
    enters its own. Thread-local state (autocast, TorchFunctionModes) does not
    reach the threads otherwise. ``remove_worker_state`` undoes it.
    """
    if capture not in _worker_state:
        _worker_state.append(capture)


def remove_worker_state(capture) -> None:
    if capture in _worker_state:
        _worker_state.remove(capture)


def _keep_thread_state(parallel_apply):
    """``parallel_apply`` whose worker threads run under the caller's thread state
    (the musa autocast, and what ``add_worker_state`` registered)."""
    @functools.wraps(parallel_apply)
    def wrapper(modules, inputs, kwargs_tup=None, devices=None):
        factories = [f for f in (capture() for capture in _worker_state) if f is not None]
        if not factories:
            return parallel_apply(modules, inputs, kwargs_tup, devices)

        def under_state(module):
            def call(*args, **kwargs):
                with contextlib.ExitStack() as stack:
                    for factory in factories:
                        stack.enter_context(factory())
                    return module(*args, **kwargs)
            return call

        return parallel_apply([under_state(m) for m in modules], inputs, kwargs_tup, devices)

    wrapper._musa_keeps_thread_state = True
    return wrapper


def install() -> list[str]:
    """Make torch.nn.parallel work on musa; returns the torch._C primitives added.

    The primitives go where torch lacks them (all of them on a CPU build). On such a
    build musa tensors never take torch.nn.parallel.comm's NCCL path, so its "not
    compiled with NCCL support" warning is silenced; and parallel_apply's threads
    keep the caller's musa autocast (and what ``add_worker_state`` registers).
    """
    added = [name for name in _PRIMITIVES if not hasattr(torch._C, name)]
    for name in added:
        setattr(torch._C, name, _PRIMITIVES[name])
    if added:
        warnings.filterwarnings("ignore", message="PyTorch is not compiled with NCCL support",
                                category=UserWarning, module=r"torch\.nn\.parallel\.comm")
    original = _parallel_apply_module.parallel_apply
    if not getattr(original, "_musa_keeps_thread_state", False):
        patched = _keep_thread_state(original)
        for module in (_parallel_apply_module, _data_parallel_module, torch.nn.parallel):
            if getattr(module, "parallel_apply", None) is original:
                module.parallel_apply = patched
    return added


# ---- the public API, as torch.cuda.comm ----

def broadcast(tensor: torch.Tensor, devices=None, *, out=None) -> tuple[torch.Tensor, ...]:
    """Copies of ``tensor`` (on the CPU or a musa device) on each of ``devices``, or
    into the musa tensors ``out``; exactly one of the two. Where the tensor already
    is, it is returned itself."""
    tensor = _handle_complex(tensor)
    if (devices is None) == (out is None):
        raise RuntimeError(f"Exactly one of 'devices' and 'out' must be specified, but got devices={devices} "
                           f"and out={out}")
    if devices is not None:
        return tuple(_broadcast(tensor, [_get_device_index(d) for d in devices]))
    return tuple(_broadcast_out(tensor, out))


def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices,
                        buffer_size: int = _DEFAULT_BUFFER) -> tuple[list[torch.Tensor], ...]:
    """Copies of ``tensors`` (all on ``devices[0]``) on each device, moved in flat
    buffers of at most ``buffer_size`` bytes; on devices[0] the tensors themselves."""
    devices = [_get_device_index(d) for d in devices]
    return tuple(_broadcast_coalesced([_handle_complex(t) for t in tensors], devices, buffer_size))


def reduce_add(inputs: Sequence[torch.Tensor], destination=None) -> torch.Tensor:
    """Elementwise sum of same-shaped musa tensors, on ``destination`` (default: the
    current device), which must hold one of them; a single input is returned as is."""
    destination = _get_device_index(destination, optional=True)
    root = None
    for i, t in enumerate(inputs):
        if t.device.type != "musa":
            raise RuntimeError(f"reduce_add expects all inputs to be on musa devices, but input {i} is on "
                               f"{t.device}")
        if t.shape != inputs[0].shape:
            raise ValueError(f"input {i} has invalid size: got {'x'.join(map(str, t.shape))}, but expected "
                             f"{'x'.join(map(str, inputs[0].shape))}")
        if root is None and _index(t) == destination:
            root = i
    if root is None:
        raise RuntimeError(f"reduce_add expects destination (musa:{destination}) to be the device of one of "
                           f"the inputs, which are on {[str(t.device) for t in inputs]}")
    if len(inputs) == 1:
        return inputs[0]
    others = [t for i, t in enumerate(inputs) if i != root]
    target = inputs[root].device
    result = inputs[root] + others[0].to(target, non_blocking=True)
    for t in others[1:]:
        result.add_(t.to(target, non_blocking=True))
    return result


def reduce_add_coalesced(inputs: Sequence[Sequence[torch.Tensor]], destination=None,
                         buffer_size: int = _DEFAULT_BUFFER) -> tuple[torch.Tensor, ...]:
    """``reduce_add`` of each group ``(inputs[0][k], inputs[1][k], ...)``, one list of
    tensors per device, moved in flat buffers of at most ``buffer_size`` bytes."""
    if len({len(group) for group in inputs}) > 1:
        raise ValueError(f"every device needs the same number of tensors, got {[len(g) for g in inputs]}")
    outputs = []
    for chunks in zip(*[_take_tensors(group, buffer_size) for group in inputs]):
        flat = reduce_add([_flatten_dense_tensors(chunk) for chunk in chunks], destination)
        # .data: each result gets its own version counter (see _broadcast_coalesced).
        outputs.extend(t.data for t in _unflatten_dense_tensors(flat, chunks[0]))
    return tuple(_reorder_tensors_as(outputs, inputs[0]))


def scatter(tensor: torch.Tensor, devices=None, chunk_sizes=None, dim: int = 0, streams=None, *,
            out=None) -> tuple[torch.Tensor, ...]:
    """Chunks of ``tensor`` along ``dim``, one per device (``tensor.chunk`` sizes unless
    ``chunk_sizes`` is given; fewer chunks than devices when the dim is short), or
    copied into the musa tensors ``out``, whose sizes give the chunks."""
    tensor = _handle_complex(tensor)
    if out is None:
        if devices is None:
            raise RuntimeError("Exactly one of 'devices' and 'out' must be specified, but got neither")
        return tuple(_scatter(tensor, [_get_device_index(d) for d in devices], chunk_sizes, dim, streams))
    if devices is not None:
        raise RuntimeError(f"'devices' must not be specified when 'out' is specified, but got devices={devices}")
    if chunk_sizes is not None:
        raise RuntimeError(f"'chunk_sizes' must not be specified when 'out' is specified, but got "
                           f"chunk_sizes={chunk_sizes}")
    return tuple(_scatter_out(tensor, out, dim, streams))


def gather(tensors: Sequence[torch.Tensor], dim: int = 0, destination=None, *, out=None) -> torch.Tensor:
    """The musa ``tensors`` concatenated along ``dim`` on ``destination`` (a musa device,
    'cpu', or -1 for the CPU; default: the current musa device), or into ``out``."""
    tensors = [_handle_complex(t) for t in tensors]
    if out is not None:
        if destination is not None:
            raise RuntimeError(f"'destination' must not be specified when 'out' is specified, but got "
                               f"destination={destination}")
        return _gather_out(tensors, out, dim)
    if destination == -1:
        warnings.warn('Using -1 to represent CPU tensor is deprecated. Please use a device object or string '
                      'instead, e.g., "cpu".', FutureWarning, stacklevel=2)
        index = -1
    elif isinstance(destination, (str, torch.device)) and torch.device(destination).type == "cpu":
        index = -1
    else:
        index = _get_device_index(destination, optional=True)
    return _gather(tensors, dim, index)

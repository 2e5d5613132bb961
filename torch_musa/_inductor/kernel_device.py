"""Inductor under the cuda driver: musa graphs compile as graphs of the kernel device.

Under the cuda driver a musa tensor is GPU memory and every eager op runs CUDA's
kernel on a CUDA alias of it. Compiled code does the same, one level up: once
AOTAutograd has split a graph into forward and backward, each graph is moved to
the kernel device (its device arguments and fake values become ``cuda``) and
compiled by Inductor's own CUDA path (Triton kernels, cuBLAS and cuDNN extern
kernels, CUDA graphs for ``mode="reduce-overhead"``). At run time it is called
with CUDA aliases of its musa arguments, and its CUDA results come back as musa
tensors over the same memory: nothing is copied. Autograd stays on musa tensors
(AOTAutograd's wrappers sit outside the move), so PyTorch's autograd engine never
meets a CUDA backward in a process with a PrivateUse1 device (pytorch#161129).

The move is the one hook Inductor leaves for this, ``compile_fx``'s
``inner_compile``: ``install`` wraps ``torch._inductor.compile_fx.compile_fx`` (what
``torch.compile``'s Inductor backend calls) so that every inner compilation of a
graph that touches musa goes through :class:`KernelDeviceCompile`.

The host driver needs it only for the graphs that get Inductor's C++ wrapper
(AOTInductor, ``cpp_wrapper=True``: ``aoti.py``); its other graphs compile on musa
directly (Inductor's C++ kernels run over musa memory, ``backend.py``). The full
move works there too with ``cpu`` as the kernel device, which is how CI tests it.
"""
from __future__ import annotations

import contextlib
import functools

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch._inductor.virtualized import V
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from torch_musa import _C
from torch_musa._inductor import aoti

__all__ = ["KernelDeviceCompile", "install", "uses_musa"]

DEVICE = "musa"


def _moved(value, kind: str):
    """``value`` with every musa ``torch.device`` in it replaced by the kernel device."""
    if isinstance(value, torch.device):
        if value.type != DEVICE:
            return value
        return torch.device(kind) if kind == "cpu" else torch.device(kind, value.index)
    if isinstance(value, (list, tuple)):
        moved = [_moved(v, kind) for v in value]
        return type(value)(moved) if not hasattr(value, "_fields") else type(value)(*moved)
    if isinstance(value, dict):
        return {k: _moved(v, kind) for k, v in value.items()}
    return value


def _is_musa(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == DEVICE


def uses_musa(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether a graph reads musa tensors or makes any."""
    if any(_is_musa(x) for x in example_inputs):
        return True
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for v in val if isinstance(val, (list, tuple)) else [val]:
            if _is_musa(v):
                return True
    return False


def _fake_on(x, kind: str, fake_mode):
    """A fake tensor of the kernel device shaped as fake musa tensor ``x`` (sizes,
    strides, offset: Inductor's alignment and layout choices read all three)."""
    if not _is_musa(x):
        return x
    device = torch.device(kind) if kind == "cpu" else torch.device(kind, x.device.index)
    with fake_mode:
        if x.storage_offset() == 0:
            return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=device)
        base = torch.empty(x.untyped_storage().nbytes() // x.element_size(), dtype=x.dtype,
                           device=device)
        return base.as_strided(x.size(), x.stride(), x.storage_offset())


def _is_real_musa(value) -> bool:
    return _is_musa(value) and not isinstance(value, FakeTensor)


def _alias_constants(gm: torch.fx.GraphModule) -> None:
    """Replaces the musa tensors the graph reads as attributes (an exported or frozen
    graph's parameters, buffers and constants) by kernel-device aliases of them, and
    the copies of buffers' first values that AOTInductor keeps in ``gm.meta`` (which
    it compiles into the model in their place)."""
    for key, value in gm.meta.items():
        if _is_real_musa(value):
            gm.meta[key] = _C._kernel_alias(value)
    for node in gm.graph.find_nodes(op="get_attr"):
        *path, name = node.target.split(".")
        owner = gm
        for part in path:
            owner = getattr(owner, part)
        value = getattr(owner, name)
        if not _is_real_musa(value):
            continue
        alias = _C._kernel_alias(value.detach())
        if name in owner._parameters:
            owner._parameters[name] = torch.nn.Parameter(alias, value.requires_grad)
        elif name in owner._buffers:
            owner._buffers[name] = alias
        else:
            setattr(owner, name, alias)


def move_graph(gm: torch.fx.GraphModule, example_inputs, kind: str):
    """Moves ``gm`` to the kernel device in place; returns its fake inputs there.

    The fake values are recomputed by propagation rather than converted one by
    one: views then share their base's fake storage as before, which Inductor's
    reinplacing pass reads to decide whether a mutation is safe.
    """
    fake_mode = detect_fake_mode(example_inputs)
    if fake_mode is None:
        raise RuntimeError("torch.compile on musa: the graph's example inputs carry no "
                           "fake-tensor mode to move them to the kernel device with")
    _alias_constants(gm)
    for node in gm.graph.nodes:
        node.args = _moved(node.args, kind)
        node.kwargs = _moved(node.kwargs, kind)
    gm.recompile()
    inputs = [_fake_on(x, kind, fake_mode) for x in example_inputs]
    shape_env = fake_mode.shape_env
    quiet = (shape_env.ignore_fresh_unbacked_symbols() if shape_env is not None
             else contextlib.nullcontext())
    with quiet:
        FakeTensorProp(gm, mode=fake_mode).propagate_dont_convert_inputs(*inputs)
    return inputs


class _OnMusa:
    """Calls code compiled for the kernel device with musa tensors, and back.

    It hides the compiled code's own attributes on purpose: AOTAutograd caches a
    graph whose compiled code has an FX-cache key, and a cache hit would bring
    back that code without this wrapper.
    """

    def __init__(self, compiled):
        # An instance attribute: wrappers such as torch._dynamo.disable copy __dict__.
        self._boxed_call = True
        self._compiled = compiled
        self._boxed = getattr(compiled, "_boxed_call", False)

    def __call__(self, args):
        moved = _C._to_kernel_args(args)
        args.clear()  # the boxed convention: the callee frees its inputs early
        outs = self._compiled(moved) if self._boxed else self._compiled(*moved)
        return _C._from_kernel_outputs(outs, -1)  # host results: the current musa device


class KernelDeviceCompile:
    """An ``inner_compile`` that compiles musa graphs as graphs of ``kind``; ``check``
    (the backend's profile dtype check) sees each musa graph before it moves.

    ``only_cpp_wrapper``: move only the graphs that get Inductor's C++ wrapper
    (AOTInductor, ``cpp_wrapper=True``; the host driver's case, see ``aoti.py``),
    leaving the others to the musa backend. An AOTInductor model is not wrapped:
    its package names musa as its device, and the musa runner does the wrapping.
    """

    def __init__(self, inner, kind: str, check=None, only_cpp_wrapper: bool = False):
        self._inner = inner
        self._kind = kind
        self._check = check
        self._only_cpp_wrapper = only_cpp_wrapper
        functools.update_wrapper(self, inner, updated=())

    def __call__(self, gm, example_inputs, *args, **kwargs):
        if not uses_musa(gm, example_inputs):
            return self._inner(gm, example_inputs, *args, **kwargs)
        if self._only_cpp_wrapper and not aoti.wants_cpp_wrapper(kwargs):
            return self._inner(gm, example_inputs, *args, **kwargs)
        aot = getattr(V, "aot_compilation", False)
        if self._check is not None:
            self._check(gm)
        inputs = move_graph(gm, example_inputs, self._kind)
        compiled = self._inner(gm, inputs, *args, **kwargs)
        if aot:
            aoti.mark_musa_package(compiled, self._kind)
            return compiled
        return _OnMusa(compiled)


def _wrap_compile_fx(stock, kind: str, check, only_cpp_wrapper: bool):
    @functools.wraps(stock)
    def compile_fx(model_, example_inputs_, inner_compile=None, *args, **kwargs):
        if inner_compile is None:
            inner_compile = torch._inductor.compile_fx.compile_fx_inner
        if not isinstance(inner_compile, KernelDeviceCompile):
            inner_compile = KernelDeviceCompile(inner_compile, kind, check, only_cpp_wrapper)
        return stock(model_, example_inputs_, inner_compile, *args, **kwargs)

    compile_fx._musa_stock = stock
    return compile_fx


def _pads_matmuls_as_on_the_gpu(kind: str) -> None:
    """Let Inductor's matmul padding judge musa matmuls as matmuls of ``kind``.

    The joint graph (forward and backward, before the move) is rewritten while its
    values are still musa ones, and ``pad_mm`` pads a matmul to the GPU's alignment
    only when its operands are CUDA (or XPU) tensors. GPT-2's vocabulary (50257)
    then left its LM-head matmuls unpadded: cuBLAS fell back to an sm75 kernel that
    took 8-13 ms where the padded one takes 1.5-1.8 ms, and the compiled step was
    1.54x the native one on an H200. The decision (and the timing runs behind it)
    is asked of fake tensors of the kernel device shaped as the musa ones; the
    padding it chooses is written into the musa graph as for any device.
    """
    from torch._inductor.fx_passes import pad_mm

    stock = pad_mm.should_pad
    if getattr(stock, "_musa_stock", None) is not None:
        return

    def should_pad(match, mat1, mat2, op, input=None):
        fake_mode = getattr(mat1, "fake_mode", None)
        if fake_mode is not None and _is_musa(mat1) and _is_musa(mat2):
            mat1, mat2, input = (_fake_on(t, kind, fake_mode) for t in (mat1, mat2, input))
        return stock(match, mat1, mat2, op, input)

    should_pad._musa_stock = stock
    pad_mm.should_pad = should_pad


def install(kind: str, check=None, only_cpp_wrapper: bool = False) -> None:
    """Route Inductor's compilations of musa graphs to ``kind`` (idempotent);
    ``only_cpp_wrapper``: only those that get the C++ wrapper."""
    import torch._inductor.compile_fx as cfx

    if getattr(cfx.compile_fx, "_musa_stock", None) is None:
        cfx.compile_fx = _wrap_compile_fx(cfx.compile_fx, kind, check, only_cpp_wrapper)
    if kind != "cpu":  # Inductor pads matmuls on GPUs only
        _pads_matmuls_as_on_the_gpu(kind)

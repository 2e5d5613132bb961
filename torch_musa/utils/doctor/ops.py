"""The op collector: every aten op the run dispatches to musa, below autograd
(so the backward's ops too), with its dtypes, shapes, FLOPs (PyTorch's FLOP
counter formulas), bytes moved and the user's line that caused it."""
from __future__ import annotations

import dataclasses
import math
import sys
from typing import Callable, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from torch_musa.utils.doctor.frames import UserCode

# Ops that only read or write the host's side of a host<->device copy.
_COPIES = {"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"}
# Ops that launch no kernel besides views: metadata, aliases, allocation without a fill.
_NO_KERNEL = {"aten::detach", "aten::alias", "aten::lift_fresh", "aten::_unsafe_view", "aten::_reshape_alias",
              "aten::_has_compatible_shallow_copy_type", "aten::empty", "aten::empty_like", "aten::empty_strided",
              "aten::new_empty", "aten::new_empty_strided", "aten::resize_", "aten::set_"}


def _sdpa(query, key, value, *_, **__) -> int:
    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _sdpa_backward(grad_out, query, key, value, *_, **__) -> int:
    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


# Attention kernels PyTorch's FLOP counter has no formula for: the CPU's (which the host
# driver runs) and the PrivateUse1 entry points, counted as its formulas count CUDA's.
_MORE_FORMULAS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_backward,
    torch.ops.aten._scaled_dot_product_fused_attention_overrideable: _sdpa,
    torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward: _sdpa_backward,
}


def _flops(func, args, kwargs, out) -> int:
    formula = flop_registry.get(func._overloadpacket)
    try:
        if formula is not None:
            return int(formula(*args, **kwargs, out_val=out))
        more = _MORE_FORMULAS.get(func._overloadpacket)
        return int(more(*args, **kwargs)) if more else 0
    except Exception:   # a formula that does not know this overload's arguments
        return 0


def _tensors(obj, out: list) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out)


def _dtype_name(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


@dataclasses.dataclass
class OpStats:
    """One op's totals over the run."""
    calls: int = 0
    dtypes: set = dataclasses.field(default_factory=set)
    largest_shape: tuple = ()
    flops: int = 0
    bytes: int = 0
    sites: dict = dataclasses.field(default_factory=dict)   # (dtype, site) -> calls
    kernel: bool = True     # False for views, metadata and bare allocations


class Call(NamedTuple):
    """One op call, as the roofline estimator needs it."""
    op: str
    dtype: str
    flops: int
    bytes: int
    kind: str      # "matmul" (has a FLOP formula), "memory", "view" (no kernel: views, metadata,
                   # allocation), "transfer" (host<->device)
    layout: str = ""   # space-separated notes: "unaligned" (a 16-bit matmul with a row, or a 16-bit
                       # convolution with a channel count, not a multiple of 16 bytes),
                       # "channels_first" (a 16-bit convolution on NCHW tensors); "" otherwise


_MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
_CONVOLUTIONS = {"aten::convolution", "aten::convolution_backward", "aten::_convolution",
                 "aten::convolution_overrideable", "aten::convolution_backward_overrideable"}


def _layout(name: str, ins: list, outs: list) -> str:
    """What the GPU's libraries do differently for this call's tensor layout: tensor-core
    GEMMs need every row (the leading dimension's stride) to start on a 16-byte boundary,
    else cuBLAS takes a slower kernel; cuDNN's tensor-core convolutions need channel counts
    of 16 bytes' multiples too, and work in NHWC (NCHW tensors are transposed around them)."""
    base = name.split(".")[0]
    tensors = [t for t in ins + outs if t.dim() >= 2]
    if not tensors or tensors[0].element_size() != 2:
        return ""
    if base in _MATMULS:
        rows = [st for t in tensors for n, st in zip(t.shape[-2:], t.stride()[-2:]) if n > 1 and st != 1]
        return "unaligned" if any(st * 2 % 16 for st in rows) else ""
    if base in _CONVOLUTIONS:
        acts = [t for t in tensors if t.dim() == 4]
        notes = []
        if any(t.shape[1] * 2 % 16 for t in acts):
            notes.append("unaligned")
        if acts and not acts[0].is_contiguous(memory_format=torch.channels_last):
            notes.append("channels_first")
        return " ".join(notes)
    return ""


class OpRecorder(TorchDispatchMode):
    """Records the musa ops dispatched while active; ``on_op`` callbacks run after each."""

    def __init__(self, user: UserCode):
        super().__init__()
        self.user = user
        self.stats: dict[str, OpStats] = {}
        self.steps: list[list[Call]] = [[]]          # calls per step; the last is open
        self.failure: dict | None = None
        self.on_op: list[Callable[[str], None]] = []
        self.backward_site: str | None = None
        self.autocast_dtypes: set[str] = set()     # what musa autocast cast to while ops ran
        self._saved: list = []

    def __enter__(self):
        # The backward's ops run on autograd's threads, without the user's frames:
        # they are attributed to the line that called backward() or grad().
        for name in ("backward", "grad"):
            orig = getattr(torch.autograd, name)
            self._saved.append((name, orig))
            setattr(torch.autograd, name, self._attributing(orig))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, orig in self._saved:
            setattr(torch.autograd, name, orig)
        self._saved.clear()
        return super().__exit__(*exc)

    def _attributing(self, fn):
        def call(*args, **kwargs):
            outer, self.backward_site = self.backward_site, self.user.site(sys._getframe(1))
            try:
                return fn(*args, **kwargs)
            finally:
                self.backward_site = outer
        return call

    def close_step(self) -> None:
        self.steps.append([])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ins: list[torch.Tensor] = []
        _tensors(args, ins)
        _tensors(kwargs, ins)
        try:
            out = func(*args, **kwargs)
        except BaseException as e:
            on_musa = any(t.device.type == "musa" for t in ins) or "musa" in str(kwargs.get("device"))
            if on_musa and self.failure is None:
                self.failure = {"op": self._name(func), "error": str(e).split("\n")[0][:500],
                                "site": self.user.site(), "dtypes": sorted({_dtype_name(t.dtype) for t in ins}),
                                "shapes": [list(t.shape) for t in ins[:4]]}
            raise
        outs: list[torch.Tensor] = []
        _tensors(out, outs)
        devices = {t.device.type for t in ins + outs}
        if "musa" in devices:
            self._record(func, args, kwargs, ins, outs, out, devices)
        return out

    @staticmethod
    def _name(func) -> str:
        overload = func._overloadname
        return func._schema.name + ("" if overload == "default" else "." + overload)

    def _record(self, func, args, kwargs, ins, outs, out, devices) -> None:
        name = self._name(func)
        floating = [t for t in ins if t.is_floating_point() or t.is_complex()]
        dtype = _dtype_name((floating or ins or outs)[0].dtype)
        flops = _flops(func, args, kwargs, out)
        if func.is_view or func._schema.name in _NO_KERNEL:
            kind, moved = "view", 0
        else:
            moved = sum(t.numel() * t.element_size() for t in ins + outs)
            if func._schema.name in _COPIES and len(devices) > 1:
                kind = "transfer"
            else:
                kind = "matmul" if flops else "memory"
        layout = _layout(name, ins, outs) if kind == "matmul" else ""
        if torch.is_autocast_enabled("musa"):
            self.autocast_dtypes.add(_dtype_name(torch.get_autocast_dtype("musa")))
        s = self.stats.get(name)
        if s is None:
            s = self.stats[name] = OpStats()
        s.calls += 1
        s.dtypes.update(_dtype_name(t.dtype) for t in ins + outs)
        big = max(ins + outs, key=lambda t: t.numel())
        if math.prod(big.shape) > math.prod(s.largest_shape or (0,)):
            s.largest_shape = tuple(big.shape)
        s.flops += flops
        s.bytes += moved
        s.kernel = kind != "view"
        site = self.user.site() or self.backward_site
        for d in {_dtype_name(t.dtype) for t in ins + outs}:
            key = (d, site)
            s.sites[key] = s.sites.get(key, 0) + 1
        self.steps[-1].append(Call(name, dtype, flops, moved, kind, layout))
        for cb in self.on_op:
            cb(name)

    def to_json(self) -> dict:
        ops = {}
        for name, s in sorted(self.stats.items(), key=lambda kv: -kv[1].calls):
            ops[name] = {"calls": s.calls, "dtypes": sorted(s.dtypes), "largest_shape": list(s.largest_shape),
                         "flops": s.flops, "bytes": s.bytes, "kernel": s.kernel,
                         "sites": [{"dtype": d, "site": site, "calls": n} for (d, site), n in s.sites.items()]}
        steps = [[list(c) for c in step] for step in self.steps if step]
        return {"ops": ops, "steps": steps, "failure": self.failure, "autocast_dtypes": sorted(self.autocast_dtypes)}

"""OpTest and InplaceOpChek: run an op on CPU copies and on musa copies of its
inputs and compare everything it produces.
"""
from __future__ import annotations

import copy
import functools
import inspect
import random
from typing import Any, Iterable

import torch
from torch.utils._pytree import tree_map

from .comparators import Comparator, DefaultComparator, _dtype_name
from .dtypes import (LOW_PRECISION, UnsupportedDtypeError, double_cast_active, dtype_supported,
                     require_dtype)
from .tolerances import tolerance

__all__ = ["OpTest", "InplaceOpChek", "InplaceOpCheck"]

_MISSING = object()

#: Result dtypes upstream's OpTest compares as float32 (so they may differ).
_WIDENED = (torch.float16, torch.bfloat16, torch.float32)


def _op_name(func) -> str:
    if func is None:
        return "<none>"
    if isinstance(func, functools.partial):
        return _op_name(func.func)
    if isinstance(func, torch.nn.Module):
        return type(func).__name__
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if name:
        for cls, shown in (("_VariableFunctionsClass.", "torch."), ("TensorBase.", "Tensor."),
                           ("_TensorBase.", "Tensor.")):
            if name.startswith(cls):
                return shown + name[len(cls):]
        mod = getattr(func, "__module__", None) or ""
        if mod.startswith("torch") and not name.startswith("torch"):
            prefix = {"torch.nn.functional": "F.", "torch._C._nn": "F.",
                      "torch._C._special": "torch.special.",
                      "torch._C._linalg": "torch.linalg."}.get(mod, "torch.")
            if "." not in name:
                return prefix + name
        return name
    return repr(func)


def _func_basename(func) -> str | None:
    if isinstance(func, functools.partial):
        return _func_basename(func.func)
    return getattr(func, "__name__", None)


def _is_inplace_func(func) -> bool:
    name = _func_basename(func)
    return bool(name) and name.endswith("_") and not name.endswith("__")


def _is_low_precision_unsupported(err: BaseException) -> bool:
    text = str(err)
    if isinstance(err, NotImplementedError):
        return True
    return any(k in text for k in ("Half", "BFloat16", "Low precision", "float16", "bfloat16"))


def _is_profile_error(err: BaseException) -> bool:
    return isinstance(err, RuntimeError) and "hardware profile" in str(err)


def _cast_target(t: torch.Tensor, dtype, key, nocast) -> Any:
    """The dtype ``t`` becomes in a run computing in ``dtype`` (None: unchanged)."""
    if dtype is None or (key in nocast and nocast[key]):
        return None
    if dtype.is_floating_point:
        return dtype if t.is_floating_point() else None
    return dtype


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: a copy with the same strides needs no gaps."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _copy_tensor(t: torch.Tensor, device, dtype=None, round_to=None) -> torch.Tensor:
    """A fresh leaf on ``device`` with the same sizes, strides and storage offset."""
    src = t.detach()
    if src.is_conj():
        src = src.resolve_conj()
    if round_to is not None and src.is_floating_point():
        src = src.to(round_to)
    target = dtype or src.dtype
    if src.numel() == 0 or src.is_contiguous() or _dense(src):
        out = src.to(device=device, dtype=target, copy=True)
    else:  # a strided view: copy the span it covers and view it the same way
        span = src.storage_offset() + 1 + sum((s - 1) * abs(st) for s, st in
                                              zip(src.shape, src.stride()))
        flat = src.as_strided((span,), (1,), 0).to(device=device, dtype=target, copy=True)
        out = flat.as_strided(src.shape, src.stride(), src.storage_offset())
    if t.requires_grad and (out.is_floating_point() or out.is_complex()):
        out.requires_grad_(True)
    return out


class _Run:
    """What one run of the op produced: labelled results in comparison order."""

    def __init__(self):
        self.results: list[tuple[str, Any]] = []
        self.inputs_after: list[tuple[str, torch.Tensor, bool]] = []


class OpTest:
    """Run ``func`` on CPU and on musa and compare every result.

    Args:
        func: the op: a function called with ``**input_args``; an ``nn.Module``
            instance or class (a class is built from ``input_args`` and called
            with the ``inputs`` dict given to the check).
        refer_func: computes the reference instead of ``func`` (same parameters).
        input_args (dict): the inputs; tensors (also inside dicts, lists, tuples)
            are copied to each device, keeping their layout and ``requires_grad``.
        comparators: a comparator or a list of them (all must pass).
        ignored_result_indices: positions of results not to compare.
        seed: seeded before building an ``nn.Module`` class, so both devices get
            the same weights.
        test_dtype: floating inputs (and module weights) are cast to it on both
            devices. A dtype the hardware profile lacks raises
            :class:`~torch_musa.testing.UnsupportedDtypeError`.
    Where the CPU cannot compute a float16/bfloat16 op, the reference is
    computed in float32 from the same rounded inputs and compared at the
    half-precision tolerance (``torch_musa.testing.TOLERANCES``).
    """

    def __init__(self, func=None, refer_func=None, input_args=None,
                 comparators=DefaultComparator(equal_nan=True), ignored_result_indices=None,
                 seed=42, test_dtype=None):
        assert func is not None, "no function defined."
        if input_args is not None and not isinstance(input_args, dict):
            raise TypeError(f"input_args must be a dict of keyword arguments, "
                            f"not {type(input_args).__name__}")
        self._func = func
        self._refer_func = refer_func
        self._input_args = dict(input_args or {})
        if isinstance(comparators, Comparator) or not isinstance(comparators, Iterable):
            comparators = [comparators]
        self._comparators = list(comparators)
        self._ignored_result_indices = set(ignored_result_indices or ())
        self._seed = seed
        self._test_dtype = test_dtype
        self._input_args_for_out_check = self.deep_copy_dict(self._input_args)

    # ------------------------------------------------------------------ helpers
    def set_random_seed(self):
        random.seed(self._seed)
        torch.manual_seed(self._seed)
        try:
            import numpy as np
            np.random.seed(self._seed)
        except ImportError:  # pragma: no cover
            pass

    def deep_copy_dict(self, args):
        res = {}
        for k, v in (args or {}).items():
            if isinstance(v, torch.Tensor):
                res[k] = v.clone()
            elif isinstance(v, dict):
                res[k] = self.deep_copy_dict(v)
            elif isinstance(v, torch.Generator):
                res[k] = v
            else:
                res[k] = copy.deepcopy(v)
        return res

    @property
    def op_name(self) -> str:
        return _op_name(self._func)

    def _convert(self, x, device, dtype, round_to, nocast, key, leaves, name):
        try:
            import numpy as np
            if isinstance(x, np.ndarray):
                x = torch.from_numpy(x)
        except ImportError:  # pragma: no cover
            pass
        if isinstance(x, torch.Tensor):
            target = _cast_target(x, dtype, key, nocast)
            rt = round_to if (target is not None and x.is_floating_point()) else None
            if x.is_quantized or x.is_mkldnn:  # the layout's own copy (onednn references take mkldnn)
                out = x.to(device) if device != "cpu" else x.clone()
            else:
                out = _copy_tensor(x, device, target, rt)
            if out.requires_grad:
                leaves.append((name, out))
            return out
        if isinstance(x, torch.nn.Module):
            m = _deepcopy_module(x)
            self._convert_module(m, device, dtype, round_to)
            return m
        if isinstance(x, dict):
            return {k: self._convert(v, device, dtype, round_to, nocast, key, leaves,
                                     f"{name}[{k!r}]") for k, v in x.items()}
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            conv = [self._convert(v, device, dtype, round_to, nocast, key, leaves,
                                  f"{name}[{i}]") for i, v in enumerate(x)]
            return type(x)(conv) if isinstance(x, tuple) else conv
        return x

    @staticmethod
    def _convert_module(m, device, dtype, round_to):
        if dtype is not None and dtype.is_floating_point:
            if round_to is not None:
                m.to(round_to)
            m.to(dtype)
        m.to(device)

    def _build_func(self, func, device, dtype, round_to, args, leaves):
        if inspect.isclass(func):
            self.set_random_seed()
            inst = func(**args)
            if isinstance(inst, torch.nn.Module):
                self._convert_module(inst, device, dtype, round_to)
            return inst
        if isinstance(func, torch.nn.Module):
            inst = _deepcopy_module(func)
            self._convert_module(inst, device, dtype, round_to)
            return inst
        return func

    @staticmethod
    def _flatten(value, label, out: list):
        if value is None:
            return
        if isinstance(value, torch.Tensor):
            out.append((label, value))
        elif isinstance(value, dict):
            for k, v in value.items():
                OpTest._flatten(v, f"{label}[{k!r}]", out)
        elif isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
            for i, v in enumerate(value):
                OpTest._flatten(v, f"{label}[{i}]", out)
        else:
            out.append((label, value))

    @staticmethod
    def _tensor_ptrs(args: dict):
        ptrs = {}

        def walk(x, name):
            if isinstance(x, torch.Tensor):
                if not x.is_quantized and x.layout == torch.strided:
                    ptrs[name] = (x, x.data_ptr(), x._version)
            elif isinstance(x, dict):
                for k, v in x.items():
                    walk(v, f"{name}[{k!r}]")
            elif isinstance(x, (list, tuple)):
                for i, v in enumerate(x):
                    walk(v, f"{name}[{i}]")

        for k, v in args.items():
            if k != "out":
                walk(v, k if isinstance(k, str) and k.startswith("[") else repr(k))
        return ptrs

    # ----------------------------------------------------------------- one run
    def _run(self, inputs, device, *, train=False, test_out=False, dtype=None, round_to=None,
             refer=False, dtype_nocast_map=None) -> _Run:
        nocast = dtype_nocast_map or {}
        func = self._refer_func if (refer and self._refer_func is not None) else self._func
        run = _Run()
        leaves: list = []
        with torch.set_grad_enabled(train):
            args = {k: self._convert(v, device, dtype, round_to, nocast, k, leaves,
                                     f"input {k!r}") for k, v in self._input_args.items()}
            is_class = inspect.isclass(func)
            call_args = {} if is_class else args
            func = self._build_func(func, device, dtype, round_to, args, leaves)
            extra_leaves: list = []
            if inputs is None:
                pos, kw = (), call_args
            elif isinstance(inputs, dict):
                kw = {k: self._convert(v, device, dtype, round_to, nocast, k, extra_leaves,
                                       f"input {k!r}") for k, v in inputs.items()}
                pos = ()
                if not is_class:
                    kw = {**call_args, **kw}
            elif isinstance(inputs, (list, tuple)):
                pos = tuple(self._convert(v, device, dtype, round_to, nocast, i, extra_leaves,
                                          f"input [{i}]") for i, v in enumerate(inputs))
                kw = {} if is_class else call_args
            else:
                pos = (self._convert(inputs, device, dtype, round_to, nocast, 0, extra_leaves,
                                     "input"),)
                kw = {} if is_class else call_args
            leaves = leaves + extra_leaves
            watched = self._tensor_ptrs({**kw, **{f"[{i}]": p for i, p in enumerate(pos)}})
            out_arg = kw.get("out") if test_out else None
            if test_out and "out" not in kw:
                raise ValueError(f"check with test_out=True for op {_op_name(func)} needs an "
                                 f"'out' entry in input_args")
            out_before = [(t.data_ptr(), tuple(t.shape)) for t in _tensors(out_arg)]
            result = _call_with_self(func, pos, kw)
            for name, (t, ptr, _) in watched.items():
                if t.data_ptr() != ptr:
                    raise AssertionError(
                        f"op {self.op_name} on {device} moved input {name} to new storage "
                        f"(data_ptr {ptr:#x} -> {t.data_ptr():#x}); inputs must stay in place")
            if test_out:
                outs = _tensors(out_arg)
                results = _tensors(result)
                for i, (t, (ptr, shape)) in enumerate(zip(outs, out_before)):
                    if t.numel() and tuple(t.shape) == shape and t.data_ptr() != ptr:
                        raise AssertionError(
                            f"op {self.op_name} on {device}: out= tensor {i} was reallocated "
                            f"although it had the right size")
                    if i < len(results) and results[i] is not t and \
                            results[i].data_ptr() != t.data_ptr():
                        raise AssertionError(
                            f"op {self.op_name} on {device}: the returned tensor {i} is not the "
                            f"out= tensor")
            flat: list = []
            self._flatten(result, "output", flat)
            run.results.extend(flat)
            if train:
                diff = [t for _, t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
                if diff:
                    loss = sum(t.float().sum() if t.is_floating_point() else t.sum().real
                               for t in diff)
                    loss.backward()
                for name, leaf in leaves:
                    run.results.append((f"grad of {name}", _grad_or_zeros(leaf)))
                if isinstance(func, torch.nn.Module):
                    for pname, p in func.named_parameters():
                        if p.requires_grad:
                            run.results.append((f"grad of parameter {pname!r}",
                                                _grad_or_zeros(p)))
            if test_out:
                for i, t in enumerate(_tensors(out_arg)):
                    run.results.append((f"out= tensor {i}", t))
            for name, (t, _, version) in watched.items():
                run.inputs_after.append((f"{name} after the call", t, t._version != version))
        return run

    def _call_func(self, inputs, device, train=False, test_out=False, compute_dtype=None,
                   refer=False, dtype_nocast_map=None, onednn_flag=False):
        """Run on ``device``; returns the results (outputs, then gradients) on the CPU."""
        del onednn_flag
        run = self._run(inputs, device, train=train, test_out=test_out,
                        dtype=compute_dtype or self._test_dtype, refer=refer,
                        dtype_nocast_map=dtype_nocast_map)
        return [v.detach().cpu() if isinstance(v, torch.Tensor) else v for _, v in run.results]

    # ------------------------------------------------------------- comparisons
    def _compare_runs(self, res: _Run, ref: _Run, *, dtype, widen_for=None,
                      ref_dtype=None, result_label="musa", golden_label="cpu",
                      compare_inputs=True):
        """Compare ``res`` with ``ref``. With ``widen_for`` (a low-precision dtype) the
        reference was computed in ``ref_dtype``: tolerances are widened to that dtype's
        and results of dtype ``ref_dtype`` in the reference must have ``widen_for``."""
        op = self.op_name
        if len(res.results) != len(ref.results):
            raise AssertionError(
                f"op {op}: {result_label} produced {len(res.results)} results "
                f"({[n for n, _ in res.results]}), {golden_label} produced "
                f"{len(ref.results)} ({[n for n, _ in ref.results]})")
        pairs = [(i, n, m, c) for i, ((n, m), (_, c)) in enumerate(zip(res.results, ref.results))]
        if compare_inputs:
            base = len(pairs)
            for j, ((n, m, mchanged), (_, c, cchanged)) in enumerate(
                    zip(res.inputs_after, ref.inputs_after)):
                if mchanged != cchanged:
                    raise AssertionError(
                        f"op {op}: {result_label} {'modified' if mchanged else 'did not modify'}"
                        f" {n.replace(' after the call', '')} in place but {golden_label} "
                        f"{'did' if cchanged else 'did not'}")
                if mchanged:
                    pairs.append((base + j, f"{n} (modified in place)", m, c))
        for i, name, m, c in pairs:
            if i in self._ignored_result_indices:
                continue
            label = f"result {i}: {name}"
            self._compare_one(m, c, op=op, dtype=dtype, name=label, widen_for=widen_for,
                              ref_dtype=ref_dtype, result_label=result_label,
                              golden_label=golden_label)

    def _compare_one(self, m, c, *, op, dtype, name, widen_for=None, ref_dtype=None,
                     result_label="musa", golden_label="cpu"):
        numbers = (int, float, complex)
        if isinstance(m, numbers) and isinstance(c, numbers) and not isinstance(m, bool) \
                and not isinstance(c, bool):
            m, c = torch.tensor(m), torch.tensor(c)   # Python numbers (e.g. from .item())
            if m.dtype != c.dtype:
                c = c.to(m.dtype) if m.is_floating_point() or m.is_complex() else c
                m = m.to(c.dtype)
        if not isinstance(m, torch.Tensor) or not isinstance(c, torch.Tensor):
            if isinstance(m, torch.Tensor) or isinstance(c, torch.Tensor) or m != c:
                raise AssertionError(
                    f"op {op}, dtype {_dtype_name(dtype)}, {name}: {result_label}={m!r} "
                    f"{golden_label}={c!r}")
            return
        check_dtype = True
        if widen_for is not None and c.is_floating_point():
            want = widen_for if c.dtype == ref_dtype else c.dtype
            if m.dtype != want:
                raise AssertionError(
                    f"op {op}, {name}: {result_label} dtype {_dtype_name(m.dtype)}, "
                    f"expected {_dtype_name(want)}")
            check_dtype = False
        elif m.dtype != c.dtype and m.dtype in _WIDENED and c.dtype in _WIDENED:
            # upstream's compare_res turns float16/bfloat16 results into float32 on
            # both sides before it asserts equal dtypes: these differences pass
            check_dtype = False
        for comp in self._comparators:
            if widen_for is not None and check_dtype is False:
                # the tolerance of the dtype the result was computed in: the low-precision
                # one, else float32 (float64 computed in float32 under double casting)
                rtol, atol = tolerance(widen_for if widen_for in LOW_PRECISION else torch.float32)
                comp = comp.widened(atol=atol, rtol=rtol)
            comp.check(m, c, op=op, dtype=dtype if dtype is not None else m.dtype, name=name,
                       check_dtype=check_dtype, result_label=result_label,
                       golden_label=golden_label)

    def compare_res(self, res1, res2):
        """Compare two lists of results (torch_musa API)."""
        r1, r2 = _Run(), _Run()
        r1.results = [(f"#{i}", v) for i, v in enumerate(_as_list(res1))]
        r2.results = [(f"#{i}", v) for i, v in enumerate(_as_list(res2))]
        self._compare_runs(r1, r2, dtype=self._test_dtype)

    # ------------------------------------------------------------------ checks
    def _input_low_dtype(self, inputs):
        if self._test_dtype is not None:
            return self._test_dtype if self._test_dtype in LOW_PRECISION else None
        for t in _tensors([self._input_args, inputs]):
            if t.dtype in LOW_PRECISION:
                return t.dtype
        return None

    def _run_musa(self, inputs, **kw):
        try:
            return self._run(inputs, "musa", **kw)
        except RuntimeError as err:
            if _is_profile_error(err) and not isinstance(err, UnsupportedDtypeError):
                raise UnsupportedDtypeError(f"OpTest for op {self.op_name}: {err}") from err
            raise

    def check_result(self, inputs=None, train=False, test_out=False, **kwargs):
        """Run the op on CPU (reference, ``refer_func`` if given) and on musa and compare
        every output; with ``train`` also the gradients of inputs (and module parameters)
        that require grad; with ``test_out`` also the ``out=`` tensor, which must be
        written in place. Inputs the op modifies in place are compared as well."""
        dtype = kwargs.pop("compute_dtype", None) or self._test_dtype
        nocast = kwargs.pop("dtype_nocast_map", None)
        kwargs.pop("onednn_flag", None)
        if kwargs:
            raise TypeError(f"check_result got unexpected arguments {sorted(kwargs)}")
        require_dtype(dtype, f"OpTest for op {self.op_name}")
        low = dtype if dtype in LOW_PRECISION else (
            self._input_low_dtype(inputs) if dtype is None else None)
        common = dict(train=train, test_out=test_out, dtype_nocast_map=nocast)
        widen = None
        try:
            ref = self._run(inputs, "cpu", refer=True, dtype=dtype, **common)
        except (RuntimeError, NotImplementedError) as err:
            if low is None or not _is_low_precision_unsupported(err):
                raise
            # the CPU cannot compute this in half precision: use float32 from the
            # same rounded inputs, and compare at the half-precision tolerance
            ref = self._run(inputs, "cpu", refer=True, dtype=torch.float32, round_to=low,
                            **common)
            widen = low
        res = self._run_musa(inputs, dtype=dtype, **common)
        ref_dtype = torch.float32
        if widen is None and self._double_cast(inputs, dtype):
            # float64 computed in float32 on musa: float32's tolerance
            widen, ref_dtype = torch.float64, torch.float64
        self._compare_runs(res, ref, dtype=dtype or low, widen_for=widen,
                           ref_dtype=ref_dtype, golden_label="cpu")

    def _double_cast(self, inputs, dtype) -> bool:
        if dtype_supported(torch.float64):
            return False
        uses_f64 = dtype == torch.float64 or (dtype is None and any(
            t.dtype == torch.float64 for t in _tensors([self._input_args, inputs])))
        return uses_f64 and double_cast_active()

    def _low_vs_high(self, inputs, train, test_out, low, high, device_ref="musa",
                     refer=True, **kwargs):
        for d in (low, high):
            require_dtype(d, f"OpTest for op {self.op_name}")
        nocast = kwargs.pop("dtype_nocast_map", None)
        common = dict(train=train, test_out=test_out, dtype_nocast_map=nocast)
        if device_ref == "musa":
            ref = self._run_musa(inputs, refer=refer, dtype=high, round_to=low, **common)
        else:
            ref = self._run(inputs, device_ref, refer=refer, dtype=high, round_to=low, **common)
        res = self._run_musa(inputs, dtype=low, **common)
        widen = low if low in LOW_PRECISION else high
        self._compare_runs(res, ref, dtype=low, widen_for=widen, ref_dtype=high,
                           result_label=f"musa {_dtype_name(low)}",
                           golden_label=f"{device_ref} {_dtype_name(high)}")

    def check_musafp16_vs_musafp32(self, inputs=None, train=False, test_out=False, **kwargs):
        """musa float16 against musa float32 (inputs first rounded to float16)."""
        self._low_vs_high(inputs, train, test_out, torch.float16, torch.float32, **kwargs)

    def check_musabf16_vs_musafp32(self, inputs=None, train=False, test_out=False, **kwargs):
        """musa bfloat16 against musa float32 (inputs first rounded to bfloat16)."""
        self._low_vs_high(inputs, train, test_out, torch.bfloat16, torch.float32, **kwargs)

    def check_musabf16_vs_musafp16(self, inputs=None, train=False, test_out=False, **kwargs):
        """musa bfloat16 against musa float16 (inputs first rounded to bfloat16)."""
        self._low_vs_high(inputs, train, test_out, torch.bfloat16, torch.float16, **kwargs)

    def check_musafp16_vs_cpufp32(self, inputs=None, train=False, test_out=False, **kwargs):
        """musa float16 against CPU float32 (inputs first rounded to float16)."""
        self._low_vs_high(inputs, train, test_out, torch.float16, torch.float32,
                          device_ref="cpu", **kwargs)

    def check_musafp16_vs_musafp16(self, inputs=None, train=False, test_out=False, **kwargs):
        """``func`` against ``refer_func``, both on musa in float16."""
        nocast = kwargs.pop("dtype_nocast_map", None)
        common = dict(train=train, test_out=test_out, dtype_nocast_map=nocast)
        ref = self._run_musa(inputs, refer=True, dtype=torch.float16, **common)
        res = self._run_musa(inputs, dtype=torch.float16, **common)
        self._compare_runs(res, ref, dtype=torch.float16, golden_label="musa refer_func")

    def _musa_args(self, dtype, requires_grad=False, device="musa", round_to=None):
        leaves: list = []
        args = {}
        for k, v in self.deep_copy_dict(self._input_args_for_out_check).items():
            if requires_grad and isinstance(v, torch.Tensor) and v.is_floating_point():
                v = v.detach().requires_grad_(True)
            args[k] = self._convert(v, device, dtype, round_to, {}, k, leaves, f"input {k!r}")
        return args, leaves

    def check_out_ops(self, bf16=False, fp16=False):
        """As the real torch_musa's: for a function returning one tensor, the ``out=``
        variant writes the functional call's values into a preallocated ``out`` tensor
        of the right size without moving it, and returns it. Skipped, as upstream, for
        modules (no ``__name__``), in-place functions (name ending in ``_``) and
        functions that return several tensors."""
        func = self._func
        if inspect.isclass(func) or isinstance(func, torch.nn.Module) or \
                _func_basename(func) is None or _is_inplace_func(func):
            return
        dtype = torch.bfloat16 if bf16 else torch.float16 if fp16 else self._test_dtype
        require_dtype(dtype, f"OpTest for op {self.op_name}")
        op = self.op_name
        with torch.no_grad():
            args, _ = self._musa_args(dtype)
            args.pop("out", None)
            normal = func(**args)
            if not isinstance(normal, torch.Tensor):
                return
            args, _ = self._musa_args(dtype)
            args.pop("out", None)
            out = torch.empty_like(normal)
            ptr = out.data_ptr()
            try:
                ret = func(**args, out=out)
            except TypeError as err:
                raise AssertionError(f"op {op} does not take out=: {err}") from err
            if out.data_ptr() != ptr:
                raise AssertionError(f"op {op}: the preallocated out= tensor was reallocated "
                                     f"although it had the right size")
            if not isinstance(ret, torch.Tensor) or ret.data_ptr() != ptr:
                raise AssertionError(f"op {op}: the returned tensor is not the out= tensor")
            for comp in self._comparators:
                comp.check(out, normal, op=op, dtype=dtype or normal.dtype,
                           name="out= tensor 0 vs the functional result",
                           result_label="out=", golden_label="functional")

    def check_inplace(self, func_name: str | None = None, self_key: str | None = None,
                      cpu_to_fp32: bool = False):
        """The in-place variant (``Tensor.<name>_`` by default) writes into self, returns
        self, matches the CPU, and agrees with the functional result on musa.

        ``self_key``: the entry of ``input_args`` that becomes self (default: the first
        tensor). The other entries are passed as keyword arguments.
        """
        base = _func_basename(self._func)
        name = func_name or (base if base.endswith("_") else base + "_")
        args = dict(self._input_args)
        if self_key is None:
            self_key = next((k for k, v in args.items() if isinstance(v, torch.Tensor)), None)
        if self_key is None or not isinstance(args.get(self_key), torch.Tensor):
            raise ValueError(f"check_inplace for op {self.op_name}: no tensor to be self")
        dtype = self._test_dtype
        require_dtype(dtype, f"OpTest for op Tensor.{name}")
        conv = {k: self._convert(v, "cpu", dtype, None, {}, k, [], k) for k, v in args.items()}
        self_tensor = conv.pop(self_key)
        check = InplaceOpChek(name, self_tensor, conv, comparators=self._comparators)
        check.check_returns_self()
        musa_self = check.check_res(cpu_to_fp32=cpu_to_fp32)
        if not _is_inplace_func(self._func) and func_name is None:
            functional = self._run_musa(None, dtype=dtype)
            label, value = functional.results[0]
            for comp in self._comparators:
                comp.check(musa_self, value, op=f"Tensor.{name}", dtype=musa_self.dtype,
                           name=f"in-place result vs functional {label}",
                           result_label="in-place", golden_label="functional")

    def check_grad_fn(self, bf16=False, fp16=False):
        """As the real torch_musa's: each musa output has the same kind of ``grad_fn`` as
        the CPU's (the same autograd formula was recorded). Float16/bfloat16 are run in
        float32 on the CPU, as upstream does: values are check_result(train=True)'s
        business. Skipped for in-place functions and ``out=`` calls."""
        func = self._func
        if _is_inplace_func(func) or "out" in self._input_args_for_out_check \
                or inspect.isclass(func):
            return
        dtype = torch.bfloat16 if bf16 else torch.float16 if fp16 else self._test_dtype
        require_dtype(dtype, f"OpTest for op {self.op_name}")
        op = self.op_name
        low = dtype if dtype in LOW_PRECISION else None
        if isinstance(func, torch.nn.Module):
            m_func = self._build_func(func, "musa", dtype, None, {}, [])
            c_func = self._build_func(func, "cpu", torch.float32 if low else dtype, low, {}, [])
        else:
            m_func = c_func = func
        m_args, _ = self._musa_args(dtype, requires_grad=True)
        c_args, _ = self._musa_args(torch.float32 if low else dtype, requires_grad=True,
                                    device="cpu", round_to=low)
        try:
            m_out = m_func(**m_args)
        except RuntimeError as err:
            if _is_profile_error(err):
                raise UnsupportedDtypeError(f"OpTest for op {op}: {err}") from err
            raise
        c_out = c_func(**c_args)
        m_flat, c_flat = _tensors(m_out), _tensors(c_out)
        if len(m_flat) != len(c_flat):
            raise AssertionError(f"op {op}: {len(m_flat)} tensor outputs on musa, {len(c_flat)} on CPU")
        for i, (m, c) in enumerate(zip(m_flat, c_flat)):
            if type(m.grad_fn) is not type(c.grad_fn):
                raise AssertionError(f"op {op}: grad_fn of musa output {i} is "
                                     f"{m.grad_fn} but on CPU {c.grad_fn}")


def _deepcopy_module(module: torch.nn.Module) -> torch.nn.Module:
    """``copy.deepcopy(module)`` that also copies a module holding computed tensors:
    ``torch.nn.utils.weight_norm`` keeps ``weight`` as a plain attribute recomputed
    from ``weight_g``/``weight_v`` by a forward pre-hook, a non-leaf that the tensor
    deepcopy protocol refuses. Such attributes are copied detached; the hook
    recomputes them on the copy's next forward."""
    memo: dict = {}
    for sub in module.modules():
        for value in vars(sub).values():
            if isinstance(value, torch.Tensor) and not value.is_leaf:
                memo[id(value)] = value.detach().clone()
    return copy.deepcopy(module, memo)


def _call_with_self(func, pos, kw):
    """Call ``func(*pos, **kw)`` as upstream does (every input a keyword). Some
    overloads name their first parameter ``self`` (``torch.searchsorted(sorted_sequence,
    self=<Scalar>)``), so ``self`` stays a keyword for builtins; Tensor methods (and a
    builtin whose signature has no ``self`` keyword, e.g. ``torch.add(self=...)``)
    take it positionally instead."""
    if "self" not in kw or not (inspect.ismethoddescriptor(func) or inspect.isbuiltin(func)):
        return func(*pos, **kw)
    positional = dict(kw)
    positional_pos = (positional.pop("self"),) + tuple(pos)
    if inspect.ismethoddescriptor(func):
        return func(*positional_pos, **positional)
    try:
        return func(*pos, **kw)
    except TypeError:  # argument parsing failed before anything ran
        return func(*positional_pos, **positional)


def _grad_or_zeros(t: torch.Tensor) -> torch.Tensor:
    return t.grad if t.grad is not None else torch.zeros_like(t)


def _tensors(x) -> list:
    out: list = []
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, dict):
        for v in x.values():
            out.extend(_tensors(v))
    elif isinstance(x, (list, tuple)):
        for v in x:
            out.extend(_tensors(v))
    return out


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


class InplaceOpChek:
    """Check an in-place tensor method: ``self_tensor.<func_name>(**input_args)``.

    :meth:`check_address` — self and the other tensor arguments keep their
    storage (addresses only, as upstream's: what the method returns is not
    checked; :meth:`check_returns_self` adds that); :meth:`check_res` — the
    values of self (and of the arguments) match the CPU's.
    """

    def __init__(self, func_name: str, self_tensor, input_args: dict | None = None,
                 comparators=None):
        self._func_name = func_name
        if not isinstance(self_tensor, torch.Tensor):
            self_tensor = torch.tensor(self_tensor)
        self._self_tensor = self_tensor.detach().cpu().clone()
        self._input_args = dict(input_args or {})
        if comparators is None:
            comparators = [DefaultComparator(equal_nan=True)]
        elif isinstance(comparators, Comparator):
            comparators = [comparators]
        self._comparators = list(comparators)

    def _prepare(self, device, to_fp32=False):
        s = _copy_tensor(self._self_tensor, device)
        args = OpTest._convert(OpTest.__new__(OpTest), self._input_args, device, None, None,
                               {}, None, [], "input")
        if to_fp32:
            if s.dtype in LOW_PRECISION:
                s = s.float()
            args = tree_map(lambda v: v.float() if isinstance(v, torch.Tensor) and
                            v.dtype in LOW_PRECISION else v, args)
        return s, args

    def args_to_device(self, args, device):
        return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}

    def check_address(self):
        s, args = self._prepare("musa")
        ptr = s.data_ptr()
        arg_ptrs = {k: v.data_ptr() for k, v in args.items() if isinstance(v, torch.Tensor)}
        getattr(s, self._func_name)(**args)
        name = f"Tensor.{self._func_name}"
        if s.data_ptr() != ptr:
            raise AssertionError(f"op {name}: self moved to new storage "
                                 f"({ptr:#x} -> {s.data_ptr():#x}); an in-place op must write "
                                 f"into self")
        for k, p in arg_ptrs.items():
            if args[k].data_ptr() != p:
                raise AssertionError(f"op {name}: argument {k!r} moved to new storage")

    def check_returns_self(self):
        """:meth:`check_address`, and the method returns ``self`` (as PyTorch's in-place
        methods do). Not part of upstream's check_address, which compares addresses only:
        an in-place helper may return something else (None, a flag)."""
        s, args = self._prepare("musa")
        ret = getattr(s, self._func_name)(**args)
        if ret is not s:
            raise AssertionError(f"op Tensor.{self._func_name} did not return self")
        self.check_address()

    def check_res(self, cpu_to_fp32=False):
        name = f"Tensor.{self._func_name}"
        m_s, m_args = self._prepare("musa")
        c_s, c_args = self._prepare("cpu", to_fp32=cpu_to_fp32)
        try:
            getattr(m_s, self._func_name)(**m_args)
        except RuntimeError as err:
            if _is_profile_error(err):
                raise UnsupportedDtypeError(f"in-place op {name}: {err}") from err
            raise
        getattr(c_s, self._func_name)(**c_args)
        widen = m_s.dtype if (cpu_to_fp32 and m_s.dtype in LOW_PRECISION) else None
        helper = OpTest.__new__(OpTest)
        helper._comparators = self._comparators
        helper._func = getattr(torch.Tensor, self._func_name, self._func_name)
        helper._ignored_result_indices = set()
        helper._compare_one(m_s, c_s, op=name, dtype=m_s.dtype, name="self after the call",
                            widen_for=widen, ref_dtype=torch.float32)
        for k in m_args:
            m, c = m_args[k], c_args[k]
            if isinstance(m, torch.Tensor):
                w = m.dtype if (cpu_to_fp32 and m.dtype in LOW_PRECISION) else None
                helper._compare_one(m, c, op=name, dtype=m.dtype,
                                    name=f"argument {k!r} after the call", widen_for=w,
                                    ref_dtype=torch.float32)
            else:
                _compare_nested(helper, m, c, op=name, what=f"argument {k!r}",
                                low=cpu_to_fp32)
        return m_s


def _compare_nested(helper, m, c, *, op, what, low):
    """Lists, tuples and dicts of in-place arguments after the call, element by element
    (tensors through the comparators on the host, others by ==), as upstream's
    compare_list/compare_dict: musa and CPU tensors are never compared directly."""
    if isinstance(m, torch.Tensor):
        if not isinstance(c, torch.Tensor):
            raise AssertionError(f"op {op}: {what} is a tensor on musa, {type(c).__name__} on CPU")
        w = m.dtype if (low and m.dtype in LOW_PRECISION) else None
        helper._compare_one(m, c, op=op, dtype=m.dtype, name=f"{what} after the call",
                            widen_for=w, ref_dtype=torch.float32)
    elif isinstance(m, (list, tuple)):
        if not isinstance(c, (list, tuple)) or len(m) != len(c):
            raise AssertionError(f"op {op}: {what} has {len(m)} elements on musa, "
                                 f"{len(c) if isinstance(c, (list, tuple)) else c!r} on CPU")
        for i, (a, b) in enumerate(zip(m, c)):
            _compare_nested(helper, a, b, op=op, what=f"{what}[{i}]", low=low)
    elif isinstance(m, dict):
        if not isinstance(c, dict) or set(m) != set(c):
            raise AssertionError(f"op {op}: {what} has keys {sorted(m)} on musa, "
                                 f"{sorted(c) if isinstance(c, dict) else c!r} on CPU")
        for k in m:
            _compare_nested(helper, m[k], c[k], op=op, what=f"{what}[{k!r}]", low=low)
    elif m != c:
        raise AssertionError(f"op {op}: {what} differs: {m!r} vs {c!r}")


#: The correctly spelled name.
InplaceOpCheck = InplaceOpChek

"""CompareWithCPU: run every device op again on CPU copies of its inputs and compare."""
from __future__ import annotations

import math
import os
import pickle
import weakref
from typing import Any

import torch

from torch_musa._driver import pick
from torch_musa.testing.tolerances import tolerance

from . import module_tracker as _mt
from ._common import (COLLECTIVE_NS, DEFAULT_ATOL, DEFAULT_RTOL, OpName, _DefaultFloat, _WindowedMode,
                      describe, flatten_tensors, fmt_err, format_frame, format_table, source_text,
                      tree_map, user_frame)

_LOW_PRECISION = (torch.float16, torch.bfloat16)


class CompareError(RuntimeError):
    """Raised (after dumping) when ``dump_error_data`` meets a mismatching op."""


# ----------------------------------------------------------------------------- CPU twins
def _conv_fwd(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return torch.ops.aten.convolution.default(input, weight, bias, stride, padding, dilation,
                                              transposed, output_padding, groups)


def _conv_bwd(grad_output, input, weight, stride, padding, dilation, transposed, output_padding,
              groups, output_mask):
    bias_sizes = [weight.shape[1] * groups if transposed else weight.shape[0]]
    return torch.ops.aten.convolution_backward.default(
        grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
        output_padding, groups, output_mask)


def _cudnn_bn(input, weight, bias, running_mean, running_var, training, momentum, eps):
    out, mean, invstd = torch.ops.aten.native_batch_norm.default(
        input, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, mean, invstd


def _cudnn_bn_bwd(input, grad_output, weight, running_mean, running_var, save_mean, save_var,
                  eps, reserve):
    return torch.ops.aten.native_batch_norm_backward.default(
        grad_output, input, weight, running_mean, running_var, save_mean, save_var, True, eps,
        [True, True, True])


# ops that only a device backend implements: their CPU equivalent, and how many leading
# outputs the two share (None: all)
CPU_EQUIVALENT = {
    "aten.convolution_overrideable.default": (_conv_fwd, None),
    "aten.convolution_backward_overrideable.default": (_conv_bwd, None),
    "aten.cudnn_batch_norm.default": (_cudnn_bn, 1),
    "aten.cudnn_batch_norm_backward.default": (_cudnn_bn_bwd, None),
}


def _cpu_function(func, name: OpName):
    """What computes ``func``'s reference on the CPU: the op itself, or its CPU equivalent."""
    return CPU_EQUIVALENT.get(name.full, (func, None))[0]


def _cpu_device(obj):
    if isinstance(obj, torch.device) and obj.type != "cpu":
        return torch.device("cpu")
    if isinstance(obj, str) and obj.split(":")[0] in ("musa", "cuda", "privateuseone", "xpu", "npu"):
        return "cpu"
    return obj


def to_cpu_tree(obj, dtype_map: dict | None = None):
    """Detached CPU copies of every tensor in obj (devices named in obj become cpu)."""
    def conv(x):
        if isinstance(x, torch.Tensor):
            c = x.detach().to("cpu", copy=True)
            if dtype_map and c.dtype in dtype_map:
                c = c.to(dtype_map[c.dtype])
            return c
        if isinstance(x, (list, tuple)):
            r = [conv(v) for v in x]
            return tuple(r) if isinstance(x, tuple) else r
        if isinstance(x, dict):
            return {k: (_cpu_device(v) if k == "device" else conv(v)) for k, v in x.items()}
        if dtype_map and isinstance(x, torch.dtype) and x in dtype_map:
            return dtype_map[x]
        return _cpu_device(x)
    return conv(obj)


_ATTENTION_OPS = {"_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_cudnn_attention"}
_MATMUL_OPS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "addmv", "mv"} \
    | _ATTENTION_OPS
_CONV_OPS = {"convolution", "convolution_backward", "cudnn_convolution",
             "cudnn_convolution_transpose", "_convolution"}
# float32 through TF32 (10-bit mantissa): what CUDA does by default for convolutions
TF32_TOLERANCE = (1e-3, 1e-2)
#: Device types whose float32 matmuls and convolutions follow the TF32 flags: CUDA's, and
#: musa's where its kernels are the GPU's (the host driver's compute in float32 whatever
#: the flags say, so its comparisons keep the float32 tolerance).
TF32_DEVICE_TYPES = ("cuda",) + pick(host=(), cuda=("musa",))


# Ops whose every output is bilinear (or linear) in its floating tensor arguments: the
# same op over their absolute values bounds each output element's magnitude terms.
# Attention's softmax between its two products is not.
_BILINEAR_OPS = (_MATMUL_OPS | _CONV_OPS) - _ATTENTION_OPS
#: Reading both factors of a product as TF32 (a 10-bit mantissa; truncated by some
#: kernels, not rounded) moves it by at most 2**-9 of its magnitude, so a sum of products
#: by at most 2**-9 of the sum of their magnitudes; twice that leaves room for the two
#: sides' float32 summation orders.
TF32_BOUND = 2.0 ** -8


def tf32_bound(func, name: OpName, cpu_args, cpu_kwargs):
    """Per element, how far a TF32 result may lie from the float32 one: ``TF32_BOUND``
    times the op over the absolute values of its inputs (|A| @ |B| for mm). A scalar
    tolerance cannot serve: a product of 64 unit normals is ~1e-2 off in TF32 where its
    value is near zero. None where the op is not bilinear or writes its arguments."""
    if name.base not in _BILINEAR_OPS or name.schema.is_mutable:
        return None
    names = [a.name for a in name.schema.arguments]

    def magnitude(v, arg):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.abs()
        if arg in ("alpha", "beta") and isinstance(v, (int, float)) and not isinstance(v, bool):
            return abs(v)
        return v

    args = [magnitude(v, names[i] if i < len(names) else "") for i, v in enumerate(cpu_args)]
    kwargs = {k: magnitude(v, k) for k, v in cpu_kwargs.items()}
    try:
        out = _cpu_function(func, name)(*args, **kwargs)
    except Exception:  # noqa: BLE001 - no bound: the scalar tolerance alone judges
        return None
    return tree_map(lambda t: t.double() * TF32_BOUND, out)


def _uses_tf32(name: OpName) -> bool:
    """Whether a float32 CUDA op may have run in TF32 under the current backend flags."""
    if name.base in _CONV_OPS:
        return bool(torch.backends.cudnn.allow_tf32)
    if name.base in _MATMUL_OPS:
        return torch.get_float32_matmul_precision() != "highest"
    return False


def _has_generator(args, kwargs) -> bool:
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Generator):
            return True
    return False


def _device_of(args, kwargs) -> torch.device | None:
    for t in flatten_tensors(args):
        if t.device.type not in ("cpu", "meta"):
            return t.device
    for t in flatten_tensors(kwargs):
        if t.device.type not in ("cpu", "meta"):
            return t.device
    d = kwargs.get("device")
    if d is not None:
        d = torch.device(d)
        if d.type not in ("cpu", "meta"):
            return d
    return None


# ----------------------------------------------------------------------------- comparison
def compare_tensor(dev: torch.Tensor, ref: torch.Tensor, atol: float | None, rtol: float | None,
                   bound: torch.Tensor | None = None):
    """(ok, max_abs, max_rel, detail, tol) of a device result against the CPU reference.

    atol/rtol None -> the defaults for the device result's dtype; integer and bool
    results must match exactly. ``bound``: a further allowance per element (the
    TF32 one, :func:`tf32_bound`); an element within it or within atol/rtol is close.
    """
    d = dev.detach().to("cpu")
    r = ref.detach()
    if tuple(d.shape) != tuple(r.shape):
        return False, math.inf, math.inf, f"shape {tuple(d.shape)} vs cpu {tuple(r.shape)}", None
    if not (d.dtype.is_floating_point or d.dtype.is_complex):     # integers / bool: exact
        if r.dtype.is_floating_point or r.dtype.is_complex:
            r = r.to(d.dtype)
        eq = d == r
        if bool(eq.all()):
            return True, 0.0, 0.0, "", (0.0, 0.0)
        bad = (~eq).nonzero()[:3].tolist()
        err = float((d.to(torch.int64) - r.to(torch.int64)).abs().max()) if d.numel() else 0.0
        picks = ", ".join(f"{tuple(i)}: {d[tuple(i)].item()} vs {r[tuple(i)].item()}" for i in bad)
        return (False, err, math.inf,
                f"{int((~eq).sum())} of {d.numel()} differ (exact match required); {picks}", (0.0, 0.0))
    if atol is None or rtol is None:
        rtol_, atol_ = tolerance(d.dtype)
        atol = atol_ if atol is None else atol
        rtol = rtol_ if rtol is None else rtol
    if d.is_complex():
        d = torch.view_as_real(d)
    if r.is_complex():
        r = torch.view_as_real(r)
    a, b = d.double(), r.double()
    if a.numel() == 0:
        return True, 0.0, 0.0, "", (atol, rtol)
    close = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    if bound is not None and tuple(bound.shape) == tuple(a.shape):
        close |= (a - b).abs() <= bound
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    diff = torch.where(same, torch.zeros((), dtype=a.dtype), (a - b).abs())
    diff = torch.nan_to_num(diff, nan=math.inf)
    max_abs = float(diff.max())
    denom = b.abs().clamp_min(1e-12)
    max_rel = float(torch.where(same, torch.zeros((), dtype=a.dtype), diff / denom).max())
    if bool(close.all()):
        return True, max_abs, max_rel, "", (atol, rtol)
    bad_mask = ~close
    idx = bad_mask.nonzero()[:3].tolist()
    picks = ", ".join(f"{tuple(i)}: {a[tuple(i)].item():.6g} vs {b[tuple(i)].item():.6g}" for i in idx)
    detail = f"{int(bad_mask.sum())} of {a.numel()} elements not close; {picks}"
    return False, max_abs, max_rel, detail, (atol, rtol)


def compare_outputs(dev_out, ref_out, atol, rtol, path="out", bound=None):
    """Compare nested outputs. Returns (ok, max_abs, max_rel, [problems], tol);
    ``bound``: per-element allowances nested as the outputs are (or None)."""
    problems: list[str] = []
    worst = [0.0, 0.0]
    tol_seen = [None]

    def rec(a, b, p, extra):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            ok, ma, mr, detail, tol = compare_tensor(
                a, b, atol, rtol, extra if isinstance(extra, torch.Tensor) else None)
            worst[0] = max(worst[0], ma)
            worst[1] = max(worst[1], mr)
            if tol is not None:
                tol_seen[0] = tol
            if not ok:
                problems.append(f"{p}: {detail}")
            return
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            if len(a) != len(b):
                problems.append(f"{p}: {len(a)} items vs cpu {len(b)}")
                worst[0] = worst[1] = math.inf
                return
            extras = extra if isinstance(extra, (list, tuple)) and len(extra) == len(a) \
                else [None] * len(a)
            for i, (x, y, e) in enumerate(zip(a, b, extras)):
                rec(x, y, f"{p}[{i}]", e)
            return
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if a is None or b is None:      # undefined gradient slots etc.
                problems.append(f"{p}: {type(a).__name__} vs cpu {type(b).__name__}")
                worst[0] = worst[1] = math.inf
            return
        if isinstance(a, float) and isinstance(b, float):
            if not (a == b or (a != a and b != b) or math.isclose(a, b, rel_tol=rtol or 1e-6,
                                                                   abs_tol=atol or 1e-9)):
                problems.append(f"{p}: {a!r} vs cpu {b!r}")
                worst[0] = max(worst[0], abs(a - b))
            return
        if a != b and not (isinstance(a, float) and a != a and b != b):
            problems.append(f"{p}: {a!r} vs cpu {b!r}")
            worst[0] = worst[1] = math.inf

    rec(dev_out, ref_out, path, bound)
    return not problems, worst[0], worst[1], problems, tol_seen[0]


def run_on_cpu(func, name: OpName, cpu_args, cpu_kwargs):
    """(reference output, retried_in_fp32, error) of func on CPU copies."""
    fn = _cpu_function(func, name)
    try:
        return fn(*cpu_args, **cpu_kwargs), False, None
    except Exception as e1:  # noqa: BLE001 - any CPU failure: try float32, then give up
        low = [t for t in flatten_tensors((cpu_args, cpu_kwargs)) if t.dtype in _LOW_PRECISION]
        dtype_args = any(isinstance(v, torch.dtype) and v in _LOW_PRECISION
                         for v in list(cpu_args) + list(cpu_kwargs.values()))
        if not low and not dtype_args:
            return None, False, f"{type(e1).__name__}: {str(e1).splitlines()[0][:200]}"
        m = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
        a32 = to_cpu_tree(cpu_args, m)
        k32 = to_cpu_tree(cpu_kwargs, m)
        try:
            return fn(*a32, **k32), True, None
        except Exception as e2:  # noqa: BLE001
            return None, True, f"{type(e2).__name__}: {str(e2).splitlines()[0][:200]}"


def _mutated_args(schema, args, kwargs):
    """Tensors an op writes into (for ops that return nothing, e.g. _foreach_add_)."""
    out = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            if a.kwarg_only or i >= len(args):
                v = kwargs.get(a.name)
            else:
                v = args[i]
            out.append(v)
    return out


# ----------------------------------------------------------------------------- taint
class _Taint:
    """Storages written by flagged ops (and ops reading them): weak, swept, bounded."""

    def __init__(self):
        self.keys: dict[int, list] = {}
        self.adds = 0

    @staticmethod
    def key(t: torch.Tensor) -> int:
        try:
            return t.untyped_storage()._cdata
        except Exception:  # noqa: BLE001 - sparse etc.
            return id(t)

    def __bool__(self):
        return bool(self.keys)

    def add(self, tensors):
        for t in tensors:
            self.keys.setdefault(self.key(t), []).append(weakref.ref(t))
        self.adds += 1
        if self.adds % 1024 == 0:
            self.sweep()

    def sweep(self):
        for k in list(self.keys):
            refs = [r for r in self.keys[k] if r() is not None]
            if refs:
                self.keys[k] = refs[-8:]
            else:
                del self.keys[k]

    def hit(self, tensors) -> bool:
        for t in tensors:
            refs = self.keys.get(self.key(t))
            if refs and any(r() is not None for r in refs):
                return True
        return False


# ----------------------------------------------------------------------------- the mode
class _OpStats:
    __slots__ = ("checked", "failed", "first", "downstream", "max_abs", "max_rel", "retried",
                 "skipped", "where", "tol")

    def __init__(self):
        self.checked = self.failed = self.first = self.downstream = 0
        self.retried = self.skipped = 0
        self.max_abs = self.max_rel = 0.0
        self.where = ""
        self.tol = None


class CompareWithCPU(_WindowedMode):
    """Compare every op on the device with the same op on CPU copies of its inputs.

    Use as a context manager around training steps and call ``.step()`` once per
    iteration. Only steps ``start_step <= step < end_step`` are compared, only on
    ranks in ``enable_ranks`` (rank from ``RANK``). Mismatches are printed (or
    written to ``compare_result_rank{R}.txt`` with ``should_log_to_file``); with
    ``output_dir`` every compared op also goes to ``compare_result_rank{R}.jsonl`` and
    a PNG of the worst error per op is drawn at exit.

    atol/rtol: left out, each float dtype gets the package's tolerance policy
    (``torch_musa.testing.TOLERANCES``); given, they apply to all float dtypes. Integer and bool
    results always need an exact match.
    """

    LOG_STEM = "compare_result"

    def __init__(self, enabled=True, atol=DEFAULT_ATOL, rtol=DEFAULT_RTOL, target_list=None,
                 white_list=None, dump_error_data=False, verbose=True, enable_ranks=None,
                 should_log_to_file=False, output_dir=None, start_step=0, end_step=None, *,
                 raise_on_error=None, max_printed=20, plot=True) -> None:
        super().__init__(enabled, target_list, white_list, enable_ranks, should_log_to_file,
                         output_dir, start_step, end_step, verbose)
        self.atol = atol
        self.rtol = rtol
        self._atol = None if isinstance(atol, _DefaultFloat) else float(atol)
        self._rtol = None if isinstance(rtol, _DefaultFloat) else float(rtol)
        self.dump_error_data = dump_error_data
        self.raise_on_error = dump_error_data if raise_on_error is None else raise_on_error
        self.max_printed = max_printed
        self.plot = plot
        self._names: dict[Any, OpName] = {}
        self.stats: dict[str, _OpStats] = {}
        self.counts = {"seen": 0, "checked": 0, "failed": 0, "first": 0, "downstream": 0,
                       "whitelisted": 0, "not_target": 0, "no_cpu_kernel": 0, "fp32_retry": 0}
        self.first_failure: dict | None = None
        self.dumped: list[str] = []
        self._taint = _Taint()
        self._printed = 0
        self._op_index = 0

    def _on_outermost_exit(self, exc_type):
        self._finish()

    def _on_step_end(self):
        self._op_index = 0

    # ------------------------------------------------------------------ dispatch
    def _name(self, func) -> OpName:
        n = self._names.get(func)
        if n is None:
            n = self._names[func] = OpName(func)
        return n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.is_active:
            return func(*args, **kwargs)
        dev = _device_of(args, kwargs)
        if dev is None:
            return func(*args, **kwargs)
        name = self._name(func)
        self.counts["seen"] += 1
        self._op_index += 1
        skip = None
        if self.target_list and not self.target_list.matches(name):
            skip = "not_target"
        elif (self.white_list.matches(name) or name.ns in COLLECTIVE_NS
              or _has_generator(args, kwargs)):
            skip = "whitelisted"
        if skip:
            out = func(*args, **kwargs)
            self.counts[skip] += 1
            if self._taint:
                self._propagate(args, kwargs, out, func)
            return out

        cpu_args, cpu_kwargs = to_cpu_tree(args), to_cpu_tree(kwargs)
        out = func(*args, **kwargs)
        ref, retried, err = run_on_cpu(func, name, cpu_args, cpu_kwargs)
        st = self.stats.get(name.full)
        if st is None:
            st = self.stats[name.full] = _OpStats()
        if err is not None:
            self.counts["no_cpu_kernel"] += 1
            st.skipped += 1
            self._emit_json({"step": self.step_cnt, "index": self._op_index, "op": name.full,
                             "status": "no_cpu_kernel", "error": err})
            if self._taint:
                self._propagate(args, kwargs, out, func)
            return out
        if retried:
            self.counts["fp32_retry"] += 1
            st.retried += 1
        dev_side, cpu_side = out, ref
        shared = CPU_EQUIVALENT.get(name.full, (None, None))[1]
        if shared is not None:
            dev_side, cpu_side = tuple(out[:shared]), tuple(ref[:shared])
        if not name.schema.returns:
            dev_side = _mutated_args(name.schema, args, kwargs)
            cpu_side = _mutated_args(name.schema, cpu_args, cpu_kwargs)
        atol, rtol = self._atol, self._rtol
        bound = None
        if atol is None and dev.type in TF32_DEVICE_TYPES and _uses_tf32(name):
            atol, rtol = TF32_TOLERANCE
            if shared is None and name.schema.returns:
                bound = tf32_bound(func, name, cpu_args, cpu_kwargs)
        ok, max_abs, max_rel, problems, tol = compare_outputs(dev_side, cpu_side, atol, rtol,
                                                              bound=bound)
        self.counts["checked"] += 1
        st.checked += 1
        st.max_abs = max(st.max_abs, max_abs)
        st.max_rel = max(st.max_rel, max_rel)
        if tol is not None:
            st.tol = tol
        inputs = flatten_tensors((args, kwargs))
        downstream = bool(self._taint) and self._taint.hit(inputs)
        if ok:
            if downstream:
                self._propagate(args, kwargs, out, func, inputs=inputs, known=True)
            if self._jsonl_file is not None:
                module, bw = _mt.current_module()
                self._emit_json({"step": self.step_cnt, "index": self._op_index, "op": name.full,
                                 "module": module, "phase": "backward" if bw else "forward",
                                 "status": "pass", "max_abs": max_abs, "max_rel": max_rel,
                                 "fp32_retry": retried})
            return out
        self._on_failure(func, name, st, args, kwargs, cpu_args, cpu_kwargs, out, ref, retried,
                         downstream, max_abs, max_rel, problems, tol)
        return out

    def _propagate(self, args, kwargs, out, func, inputs=None, known=False):
        if not known:
            inputs = flatten_tensors((args, kwargs)) if inputs is None else inputs
            if not self._taint.hit(inputs):
                return
        outs = flatten_tensors(out)
        name = self._name(func)
        if not name.schema.returns:
            outs += flatten_tensors(_mutated_args(name.schema, args, kwargs))
        self._taint.add(outs)

    # ------------------------------------------------------------------ failures
    def _on_failure(self, func, name, st, args, kwargs, cpu_args, cpu_kwargs, out, ref, retried,
                    downstream, max_abs, max_rel, problems, tol):
        module, bw = _mt.current_module()
        node = _mt.autograd_node_name() if bw else ""
        if bw:
            src = _mt.STATE.call_site.get(module, "")
            code = ""
        else:
            fr = user_frame(3)
            src, code = format_frame(fr), source_text(fr)
        kind = "downstream" if downstream else "first"
        self.counts["failed"] += 1
        self.counts[kind] += 1
        st.failed += 1
        st.first += kind == "first"
        st.downstream += kind == "downstream"
        where = f"{module or '<top>'} ({'backward' if bw else 'forward'})"
        if not st.where:
            st.where = where
        record = {"step": self.step_cnt, "index": self._op_index, "op": name.full,
                  "module": module, "phase": "backward" if bw else "forward", "grad_fn": node,
                  "src": src, "status": "fail", "kind": kind, "max_abs": max_abs,
                  "max_rel": max_rel, "atol": tol[0] if tol else None,
                  "rtol": tol[1] if tol else None, "fp32_retry": retried, "problems": problems}
        if self.first_failure is None and kind == "first":
            self.first_failure = record
        outs = flatten_tensors(out)
        if not name.schema.returns:
            outs += flatten_tensors(_mutated_args(name.schema, args, kwargs))
        self._taint.add(outs)
        dump_path = None
        if self.dump_error_data and name.legacy not in self.dumped:
            dump_path = save_data_for_op(out, cpu_args, cpu_kwargs, self.output_dir or os.getcwd(),
                                         name.legacy, self.file_suffix, op=name.full, device=str(
                                             _device_of(args, kwargs)), ref=ref, info=record)
            self.dumped.append(name.legacy)
            record["dump"] = dump_path
        self._emit_json(record)
        self._print_failure(record, name, args, kwargs, out, code)
        if dump_path and self.raise_on_error:
            raise CompareError(f"CompareWithCPU: {name.full} at {where} differs from CPU; "
                               f"inputs saved to {dump_path}")

    def _print_failure(self, rec, name, args, kwargs, out, code):
        if self._printed >= self.max_printed:
            if self._printed == self.max_printed:
                self._emit_text("[CompareWithCPU] more mismatches: see the JSON log / summary")
            self._printed += 1
            return
        self._printed += 1
        tag = "FIRST DIVERGENCE" if rec is self.first_failure else (
            "mismatch (downstream of a flagged op)" if rec["kind"] == "downstream" else "mismatch")
        tol = (f"atol={rec['atol']:g}, rtol={rec['rtol']:g}" if rec["atol"] not in (None, 0.0)
               or rec["rtol"] not in (None, 0.0) else "exact")
        lines = [f"[CompareWithCPU] {tag}: {rec['op']}  step {rec['step']} op #{rec['index']}",
                 f"    module : {rec['module'] or '<top>'} ({rec['phase']})"
                 + (f"  grad_fn={rec['grad_fn']}" if rec["grad_fn"] else "")]
        if rec["src"]:
            lines.append(f"    source : {rec['src']}" + (f": {code}" if code else ""))
        lines.append(f"    error  : max_abs={fmt_err(rec['max_abs'])} max_rel={fmt_err(rec['max_rel'])} ({tol})"
                     + ("  [cpu ran in float32: no kernel for the dtype]" if rec["fp32_retry"] else ""))
        for p in rec["problems"][:4]:
            lines.append(f"    diff   : {p}")
        if self.verbose and rec["kind"] == "first":
            lines.append(f"    inputs : {describe(list(args))}" + (f" {describe(kwargs)}" if kwargs else ""))
            lines.append(f"    output : {describe(out)}")
        if rec.get("dump"):
            lines.append(f"    dumped : {rec['dump']}")
        self._emit_text("\n".join(lines))

    # ------------------------------------------------------------------ summary
    def summary(self, max_rows: int = 15) -> str:
        c = self.counts
        head = (f"[CompareWithCPU] rank {self.global_rank}: {c['checked']} ops checked, "
                f"{c['failed']} failed ({c['first']} first, {c['downstream']} downstream), "
                f"{c['whitelisted']} whitelisted, {c['not_target']} not in target_list, "
                f"{c['no_cpu_kernel']} without a CPU kernel, {c['fp32_retry']} compared via float32")
        rows = []
        items = sorted(self.stats.items(), key=lambda kv: (-kv[1].failed, -kv[1].max_rel, kv[0]))
        hidden = max(0, len(items) - max_rows) if max_rows else 0
        for op, s in items[:len(items) - hidden]:
            tol = ("exact" if s.tol == (0.0, 0.0) else f"{s.tol[0]:g}/{s.tol[1]:g}") if s.tol else "-"
            rows.append([op, s.checked, s.failed, fmt_err(s.max_abs), fmt_err(s.max_rel), tol,
                         s.where if s.failed else ("no cpu kernel" if s.skipped and not s.checked else "")])
        table = format_table(["op", "checked", "failed", "max_abs", "max_rel", "atol/rtol", "first failure at"], rows)
        out = head + ("\n" + table if rows else "")
        if hidden:
            rest = items[len(items) - hidden:]
            out += (f"\n... {hidden} more ops ({sum(v.checked for _, v in rest)} checks, "
                    f"{sum(v.failed for _, v in rest)} failed); all in the JSON log")
        if self.first_failure:
            f = self.first_failure
            out += (f"\nfirst divergent op: {f['op']} in {f['module'] or '<top>'} ({f['phase']}), "
                    f"step {f['step']}" + (f", {f['src']}" if f["src"] else ""))
        return out

    def _finish(self):
        text = self.summary()
        self._emit_text(text)
        if self._text_file is not None:       # the table also goes to the console
            print(text, flush=True)
        if self.plot and self.output_dir and self.stats:
            try:
                p = plot_max_error(self.stats, self._path("compare_max_error", "png"))
                self._emit_text(f"[CompareWithCPU] max error per op: {p}")
            except Exception as e:  # noqa: BLE001 - plotting is optional
                self._emit_text(f"[CompareWithCPU] plot skipped: {e}")
        self._close_files()


def plot_max_error(stats: dict, path: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = sorted(((op, s) for op, s in stats.items() if s.checked),
                   key=lambda kv: -(kv[1].max_rel if math.isfinite(kv[1].max_rel) else 1e30))[:60]
    names = [op.replace("aten.", "").replace(".default", "") for op, _ in items]
    vals = [min(max(s.max_rel, 1e-12), 1e12) for _, s in items]
    colors = ["#d62728" if s.failed else "#1f77b4" for _, s in items]
    fig, ax = plt.subplots(figsize=(max(6, 0.28 * len(items) + 2), 4.5))
    ax.bar(range(len(items)), vals, color=colors)
    ax.set_yscale("log")
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels(names, rotation=75, ha="right", fontsize=7)
    ax.set_ylabel("max relative error vs CPU")
    ax.set_title("CompareWithCPU: worst error per op (red = failed)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- dump/replay
def save_data_for_op(out, cpu_args, cpu_kwargs, save_dir, op_name, file_suffix="", *, op=None,
                     device=None, ref=None, info=None):
    """Write ``{op_name}_inputs{suffix}.pkl`` / ``..._outputs{suffix}.pkl``; return the inputs path."""
    os.makedirs(save_dir, exist_ok=True)
    ip = os.path.join(save_dir, f"{op_name}_inputs{file_suffix}.pkl")
    op_ = os.path.join(save_dir, f"{op_name}_outputs{file_suffix}.pkl")
    inputs = {"args": cpu_args, "kwargs": cpu_kwargs, "op": op, "device": device, "info": info}
    outputs = {"device": to_cpu_tree(out), "cpu": ref} if ref is not None else to_cpu_tree(out)
    for path, obj in ((ip, inputs), (op_, outputs)):
        with open(path, "wb") as f:
            pickle.dump(obj, f)
    return ip


def load_dump(path: str) -> dict:
    with open(path, "rb") as f:
        try:
            return pickle.load(f)
        except Exception:  # noqa: BLE001 - torch.save format
            f.seek(0)
            return torch.load(f, weights_only=False)


def resolve_op(op_func, data: dict):
    if op_func is not None:
        return op_func
    name = data.get("op")
    if not name:
        raise ValueError("the dump names no op: pass op_func")
    ns, opname, overload = name.split(".", 2)
    return getattr(getattr(getattr(torch.ops, ns), opname), overload)


def _replay_device(data: dict, device):
    if device is not None:
        return torch.device(device)
    d = data.get("device")
    if d and d != "None":
        return torch.device(d)
    return torch.device("musa")


def compare_for_single_op(inputs_data_save_path, op_func=None, atol=None, rtol=None, *,
                          device=None, verbose=True):
    """Replay a dumped op on the device and compare it with CPU.

    Returns ``(correct, args, kwargs, out)`` like torch_musa's tool. ``op_func``,
    when left out, is the op recorded in the dump; atol/rtol None -> dtype defaults.
    """
    data = load_dump(inputs_data_save_path)
    func = resolve_op(op_func, data)
    dev = _replay_device(data, device)
    mover = lambda t: t.to(dev)  # noqa: E731
    args = tree_map(mover, data["args"])
    kwargs = tree_map(mover, data["kwargs"])
    kwargs = {k: (dev if k == "device" and v is not None and torch.device(v).type == "cpu" and
                  data.get("device") not in (None, "None") else v) for k, v in kwargs.items()}
    cpu_args, cpu_kwargs = to_cpu_tree(args), to_cpu_tree(kwargs)
    out = func(*args, **kwargs)
    name = OpName(func) if hasattr(func, "_schema") else None
    if name is not None:
        ref, retried, err = run_on_cpu(func, name, cpu_args, cpu_kwargs)
    else:
        try:
            ref, retried, err = func(*cpu_args, **cpu_kwargs), False, None
        except Exception as e:  # noqa: BLE001
            ref, retried, err = None, False, str(e)
    label = name.full if name else getattr(func, "__name__", str(func))
    if err is not None:
        print(f"[compare_for_single_op] {label}: no CPU reference ({err})")
        return False, args, kwargs, out
    if name is not None and not name.schema.returns:
        ok, ma, mr, problems, tol = compare_outputs(_mutated_args(name.schema, args, kwargs),
                                                    _mutated_args(name.schema, cpu_args, cpu_kwargs),
                                                    atol, rtol)
    else:
        ok, ma, mr, problems, tol = compare_outputs(out, ref, atol, rtol)
    if verbose:
        status = "matches CPU" if ok else "DIFFERS from CPU"
        print(f"[compare_for_single_op] {label} on {dev} {status}: max_abs={fmt_err(ma)} "
              f"max_rel={fmt_err(mr)}" + (" (cpu in float32)" if retried else ""))
        for p in problems[:4]:
            print(f"    {p}")
    return ok, args, kwargs, out

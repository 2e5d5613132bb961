"""Recording the operator cases a real run produces, as a benchmark suite.

Dispatch-level tracing: a TorchDispatchMode sees every aten op call (forward and
backward) with its real shapes and dtypes. Calls are grouped by op and argument
structure; each distinct set of shapes becomes one entry of the case's list.

    from torch_musa.op_benchmark import record
    with record() as rec:
        loss = model(x).sum(); loss.backward()
    rec.write_suite("my_model.yaml")

or from the command line: ``musa-bench --capture train.py --capture-output my_model.yaml``.
"""
from __future__ import annotations

import os
import runpy
import sys
from collections import OrderedDict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import yaml

# metadata-only ops: they move no data, so there is nothing to benchmark
VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice", "select",
    "unsqueeze", "squeeze", "as_strided", "alias", "detach", "unbind", "split", "split_with_sizes",
    "chunk", "narrow", "diagonal", "view_as", "expand_as", "unflatten", "flatten", "lift_fresh",
    "_reshape_alias", "_local_scalar_dense", "is_same_size", "_has_compatible_shallow_copy_type",
    "set_", "resize_", "_to_copy_meta", "sym_size", "sym_stride", "sym_numel", "dim", "size",
    "stride", "numel", "is_contiguous", "_unsafe_index_put", "view_as_real", "view_as_complex",
    "_conj", "conj", "_neg_view", "real", "imag", "prim_layout", "prim_device",
}
# results that depend on random state or are uninitialised: timed, never compared
UNCHECKED_OPS = {
    "bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "rand", "randn", "randint",
    "randperm", "rand_like", "randn_like", "randint_like", "native_dropout", "dropout",
    "multinomial", "exponential_", "random_", "geometric_", "cauchy_", "log_normal_", "empty",
    "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_fused_dropout",
    "index_put_", "_index_put_impl_",
}


def _base_name(func) -> str:
    return func._schema.name.split("::", 1)[-1]


class _Sig:
    """The argument structure of one call: tensor slots become $tN, the rest literals."""

    def __init__(self, device_type):
        self.device_type = device_type
        self.tensors: list[torch.Tensor] = []
        self.literals: list = []       # numbers and int lists: $p0, $p1, ... (per-call values)
        self.foreign_device = False

    def _lit(self, v):
        self.literals.append(v)
        return f"$p{len(self.literals) - 1}"

    def encode(self, v):
        if isinstance(v, torch.Tensor):
            if self.device_type and v.device.type != self.device_type:
                self.foreign_device = True
            self.tensors.append(v)
            return f"$t{len(self.tensors) - 1}"
        if isinstance(v, (torch.SymInt, torch.SymFloat)):
            v = int(v) if isinstance(v, torch.SymInt) else float(v)
        if isinstance(v, (list, tuple)):
            if v and all(isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool) for x in v):
                return self._lit([int(x) for x in v])
            return [self.encode(x) for x in v]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
                return f"$float('{v}')"
            return self._lit(float(f"{v:.6g}") if isinstance(v, float) else v)
        if isinstance(v, torch.dtype):
            return f"${v}"                       # "$torch.float32"
        if isinstance(v, torch.device):
            return "$device"
        if isinstance(v, torch.memory_format):
            return f"${v}"                       # "$torch.contiguous_format"
        if isinstance(v, torch.layout):
            return f"${v}"                       # "$torch.strided"
        if isinstance(v, torch.Generator):
            return None
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return int(v) if isinstance(v, torch.SymInt) else float(v)
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return f"$float('{v}')"
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return f"${v!r}" if isinstance(v, complex) else str(v)


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


class CapturedCase:
    def __init__(self, op: str, base: str, args, kwargs, dtypes, case_dtype):
        self.op, self.base, self.args, self.kwargs = op, base, args, kwargs
        self.input_dtypes = dtypes
        self.case_dtype = case_dtype
        self.entries: "OrderedDict[tuple, dict]" = OrderedDict()   # shapes -> params
        self.calls = 0
        self.layout = None


class Recorder(TorchDispatchMode):
    """A dispatch mode that records op cases. Use as a context manager, then write_suite()."""

    def __init__(self, device_type: str | None = None, include_views: bool = False,
                 record_values: bool = True):
        super().__init__()
        self.device_type = device_type
        self.include_views = include_views
        self.record_values = record_values
        self.cases: "OrderedDict[tuple, CapturedCase]" = OrderedDict()
        self.total_calls = 0
        self.skipped = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            self._record(func, args, kwargs)
        except Exception:  # noqa: BLE001 - recording never breaks the run being recorded
            self.skipped += 1
        return func(*args, **kwargs)

    def _record(self, func, args, kwargs):
        base = _base_name(func)
        if not self.include_views and (base in VIEW_OPS or base.rstrip("_") in VIEW_OPS):
            return
        if func._schema.name.startswith("prim::") or "::" in func._schema.name and \
                not func._schema.name.startswith("aten::"):
            return
        sig = _Sig(self.device_type)
        enc_args = sig.encode(list(args))
        enc_kwargs = {k: sig.encode(v) for k, v in kwargs.items()}
        if self.device_type and (sig.foreign_device or (not sig.tensors and
                                                       kwargs.get("device") is None)):
            return
        if self.device_type and not sig.tensors:
            dev = kwargs.get("device")
            if torch.device(dev).type != self.device_type:
                return
        self.total_calls += 1
        dts = tuple(str(t.dtype).replace("torch.", "") for t in sig.tensors)
        floats = [d for d in dts if d in ("float32", "float16", "bfloat16", "float64")]
        case_dtype = floats[0] if floats else "float32"
        layout = tuple(self._layout(t) for t in sig.tensors)
        key = (str(func), _freeze(enc_args), _freeze(enc_kwargs), dts, layout)
        case = self.cases.get(key)
        if case is None:
            case = CapturedCase(f"torch.ops.aten.{base}.{func._overloadname}", base, enc_args,
                                enc_kwargs, dts, case_dtype)
            case.layout = layout
            self.cases[key] = case
        case.calls += 1
        shapes = tuple(tuple(t.shape) for t in sig.tensors)
        ekey = (shapes, _freeze(sig.literals))
        entry = case.entries.get(ekey)
        if entry is None:
            params = {f"s{i}": list(s) for i, s in enumerate(shapes)}
            params.update({f"p{i}": v for i, v in enumerate(sig.literals)})
            entry = {"count": 0, "params": params}
            if self.record_values:
                for i, t in enumerate(sig.tensors):
                    self._value_params(params, i, t)
            case.entries[ekey] = entry
        entry["count"] += 1

    @staticmethod
    def _layout(t):
        if t.dim() >= 2 and not t.is_contiguous() and t.transpose(-1, -2).is_contiguous():
            return "T"
        return "C"

    @staticmethod
    def _value_params(params, i, t):
        if t.numel() == 0 or t.dtype == torch.bool or t.is_complex():
            return
        if not t.is_floating_point():
            params[f"lo{i}"] = int(t.min().item())
            params[f"hi{i}"] = int(t.max().item()) + 1
        else:
            params[f"pos{i}"] = bool((t > 0).all().item())

    # ------------------------------------------------------------ output
    def to_suite_dict(self, suite_name: str = "captured", source: str | None = None) -> dict:
        names: dict[str, int] = {}
        cases = []
        for case in self.cases.values():
            k = names.get(case.base, 0)
            names[case.base] = k + 1
            name = case.base if k == 0 else f"{case.base}_{k + 1}"
            entries = [dict(e["params"]) for e in case.entries.values()]
            keys = set().union(*(e.keys() for e in entries))
            entries = [e for e in entries if set(e) == keys] or entries[:1]
            # a literal or value bound that never changes is written in place, not as a parameter
            const = {k: entries[0][k] for k in keys if not k.startswith("s")
                     and all(e[k] == entries[0][k] for e in entries)}
            for e in entries:
                for k in const:
                    e.pop(k, None)
            args = _subst(case.args, const)
            kwargs = _subst(case.kwargs, const)
            inputs = []
            for i, dt in enumerate(case.input_dtypes):
                spec = {"name": f"t{i}", "shape": [f"s{i}"]}
                if dt != case.case_dtype:
                    spec["dtype"] = dt
                if dt == "bool":
                    spec["init"] = "bool"
                elif f"lo{i}" in keys:
                    spec.update(init="randint", low=const.get(f"lo{i}", f"lo{i}"),
                                high=const.get(f"hi{i}", f"hi{i}"))
                elif f"pos{i}" in keys and const.get(f"pos{i}"):
                    spec["init"] = "positive"
                if case.layout[i] == "T":
                    spec["contiguous"] = False
                inputs.append(spec)
            for e in entries:
                for k in [k for k in e if k.startswith("pos")]:
                    e.pop(k)
            c = {"name": name, "op": case.op, "inputs": inputs, "args": args}
            if kwargs:
                c["kwargs"] = kwargs
            c["dtypes"] = [case.case_dtype]
            c["count"] = case.calls
            if case.base in UNCHECKED_OPS or case.base.rstrip("_") in UNCHECKED_OPS:
                c["check"] = False
            c["configs"] = [{"tags": ["captured"], "list": entries}]
            cases.append(c)
        doc = {"suite": suite_name,
               "description": f"captured from {source or 'a run'}: {self.total_calls} op calls, "
                              f"{len(cases)} cases (count: calls seen)",
               "cases": cases}
        return doc

    def to_yaml(self, suite_name: str = "captured", source: str | None = None) -> str:
        return _dump(self.to_suite_dict(suite_name, source))

    def write_suite(self, path: str, suite_name: str | None = None, source: str | None = None):
        name = suite_name or os.path.splitext(os.path.basename(path))[0]
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_yaml(name, source))
        return path


def _subst(v, const):
    if isinstance(v, str) and v.startswith("$") and v[1:] in const:
        return const[v[1:]]
    if isinstance(v, list):
        return [_subst(x, const) for x in v]
    if isinstance(v, dict):
        return {k: _subst(x, const) for k, x in v.items()}
    return v


class _FlowList(list):
    pass


class _FlowDict(dict):
    pass


def _dump(doc) -> str:
    class D(yaml.SafeDumper):
        pass

    def flow_list(dumper, data):
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
    D.add_representer(_FlowList, flow_list)
    D.add_representer(_FlowDict, lambda dumper, data: dumper.represent_mapping(
        "tag:yaml.org,2002:map", data, flow_style=True))

    def flowify(v, depth=0):
        if isinstance(v, dict):
            d = {k: flowify(x, depth + 1) for k, x in v.items()}
            if depth >= 3 and all(not isinstance(x, (dict, list)) or isinstance(x, _FlowList)
                                  for x in d.values()):
                return _FlowDict(d)
            return d
        if isinstance(v, list):
            inner = [flowify(x, depth + 1) for x in v]
            if all(not isinstance(x, (dict, list)) or isinstance(x, _FlowList) for x in inner):
                return _FlowList(inner)
            return inner
        return v
    return yaml.dump(flowify(doc), Dumper=D, sort_keys=False, width=100, default_flow_style=False)


def capture_script(path: str, argv: list[str] | None = None, device_type: str | None = None,
                   **kwargs) -> Recorder:
    """Run a Python script as __main__ under a Recorder; return the recorder."""
    rec = Recorder(device_type=device_type, **kwargs)
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [path] + list(argv or [])
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    rec.error = None
    try:
        with rec:
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as e:
                if e.code not in (None, 0):
                    rec.error = f"SystemExit({e.code})"
            except Exception as e:  # noqa: BLE001 - keep what was recorded up to the failure
                import traceback
                traceback.print_exc()
                rec.error = f"{type(e).__name__}: {e}"
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    return rec


def write_suite(rec: Recorder, path: str, suite_name: str | None = None, source: str | None = None):
    return rec.write_suite(path, suite_name, source)

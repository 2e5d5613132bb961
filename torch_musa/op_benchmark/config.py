"""Suite files: YAML data describing operator benchmark cases.

A suite file holds one suite::

    suite: softmax                 # defaults to the file name
    description: free text
    cases:
      - name: softmax              # unique inside the suite
        op: torch.softmax          # a dotted callable (torch., F., nn., Tensor., aten., bench.)
        # or  expr: bench.rms_norm  (expr names a callable too; nothing is evaluated as Python)
        inputs:                    # tensors, generated on the CPU from a fixed seed
          - {name: x, shape: [M, N]}             # dims: ints, parameter names or expressions
          - {name: i, shape: [K], dtype: int64, high: N}   # init: randn|rand|randint|ones|zeros|positive|bool
        args: [$x, -1]             # optional; default: the inputs in order. "$formula" is a
        kwargs: {dim: -1}          #   formula over the inputs and parameters (and dtype, device)
        dtypes: [float32, float16] # the case dtype; inputs without a dtype take it
        backward: true             # also time forward+backward (float inputs get requires_grad)
        flops: 5*M*N               # formulas over parameters, plus elem (bytes per element)
        bytes: 2*M*N*elem          # default bytes: the tensors read and written, measured
        check: true                # false: not compared across devices (non-deterministic ops)
        configs:                   # each entry: tags and a cross product or an explicit list
          - {tags: [short], cross: {M: [32, 128], N: [64]}}
          - {tags: [long], list: [{M: 1024, N: 4096}], dtypes: [float32]}
        params: {eps: 1.0e-6}      # constants shared by every config

More keys: per case ``flops_bwd``/``bytes_bwd`` (added for forward+backward), ``rtol``/``atol``
(may only loosen the dtype's tolerances); per input ``init`` (also arange, perm), ``low``/
``high``, ``scale``, ``grad: false`` (no gradient), ``contiguous: false`` (column-major).
Every error names the file and line it comes from.

Suite files are data (``formulas``): formulas are arithmetic over the names a
suite declares, and ``op``/``expr`` name a callable on an allowlisted root
(``bench.`` is ``composites``, for compositions of ops); nothing in a suite is
evaluated as Python.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Any

import yaml

import torch

from torch_musa.op_benchmark import formulas

SUITE_DIR = os.path.join(os.path.dirname(__file__), "suites")

DTYPES = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float64": torch.float64, "double": torch.float64, "fp64": torch.float64,
    "int64": torch.int64, "long": torch.int64, "int32": torch.int32, "int": torch.int32,
    "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
INITS = ("randn", "rand", "randint", "ones", "zeros", "positive", "bool", "arange", "perm")
CASE_KEYS = {"name", "op", "expr", "inputs", "args", "kwargs", "dtypes", "backward", "flops",
             "bytes", "flops_bwd", "bytes_bwd", "check", "configs", "params", "description",
             "count", "atol", "rtol"}
INPUT_KEYS = {"name", "shape", "dtype", "init", "low", "high", "grad", "scale", "contiguous"}
CONFIG_KEYS = {"tags", "cross", "list", "dtypes"}
SUITE_KEYS = {"suite", "description", "cases"}


class SuiteError(ValueError):
    """A problem in a suite file; the message starts with ``file:line:``."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line, self.message = path, line, message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


# ---------------------------------------------------------------- YAML with line numbers
class _LDict(dict):
    line: int = 0
    key_lines: dict


class _LList(list):
    line: int = 0


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    d = _LDict()
    d.line = node.start_mark.line + 1
    d.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise SuiteError(loader.name, key_node.start_mark.line + 1, f"unhashable key {key!r}")
        if key in d:
            raise SuiteError(loader.name, key_node.start_mark.line + 1, f"duplicate key {key!r}")
        d[key] = loader.construct_object(value_node, deep=True)
        d.key_lines[key] = key_node.start_mark.line + 1
    return d


def _construct_sequence(loader, node, deep=False):
    out = _LList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def _line(obj, key=None, default=None):
    if key is not None and isinstance(obj, _LDict) and key in obj.key_lines:
        return obj.key_lines[key]
    return getattr(obj, "line", default)


# ---------------------------------------------------------------- the data model
@dataclasses.dataclass
class InputSpec:
    name: str
    shape: list            # ints / compiled expressions
    dtype: str | None      # None: the case dtype
    init: str
    low: Any = None
    high: Any = None
    grad: bool = True
    scale: float = 1.0
    contiguous: bool = True


@dataclasses.dataclass
class CaseSpec:
    suite: str
    name: str
    op: str | None
    expr: str | None
    inputs: list[InputSpec]
    args: Any
    kwargs: dict
    dtypes: list[str]
    backward: bool
    flops: str | None
    bytes: str | None
    flops_bwd: str | None
    bytes_bwd: str | None
    check: bool
    configs: list[tuple[list[str], list[dict], list[str] | None]]  # tags, params, dtypes
    params: dict
    path: str
    line: int
    atol: float | None = None
    rtol: float | None = None
    count: int | None = None

    @property
    def full_name(self) -> str:
        return f"{self.suite}.{self.name}"


@dataclasses.dataclass
class Test:
    """One concrete benchmark: a case, its parameter values, a dtype and a mode."""
    case: CaseSpec
    params: dict
    dtype: str
    mode: str               # "fwd" or "fwd+bwd"
    tags: list[str]

    @property
    def param_str(self) -> str:
        return ",".join(f"{k}={_fmt_param(v)}" for k, v in self.params.items()
                        if k not in self.case.params)

    @property
    def id(self) -> str:
        p = self.param_str
        return f"{self.case.full_name}/{p}/{self.dtype}/{self.mode}" if p else \
            f"{self.case.full_name}/{self.dtype}/{self.mode}"


def _fmt_param(v):
    if isinstance(v, (list, tuple)):
        return "x".join(str(x) for x in v) if v else "()"
    return str(v)


@dataclasses.dataclass
class Suite:
    name: str
    path: str
    description: str
    cases: list[CaseSpec]


# ---------------------------------------------------------------- parsing
def _check_expr(path, line, text, what):
    try:
        formulas.parse(str(text))
    except formulas.FormulaError as e:
        raise SuiteError(path, line, f"{what}: {e}") from None


def _check_callable(path, line, text, what):
    try:
        return formulas.check_callable_name(text)
    except formulas.FormulaError as e:
        raise SuiteError(path, line, f"{what}: {e}") from None


def _walk_dollar(path, line, value, what):
    if isinstance(value, str) and value.startswith("$"):
        _check_expr(path, line, value[1:], what)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _walk_dollar(path, line, v, what)
    elif isinstance(value, dict):
        for v in value.values():
            _walk_dollar(path, line, v, what)


def _check_keys(path, raw, allowed, what: str, shown: str | None = None) -> None:
    """SuiteError at the first key of ``raw`` not in ``allowed``: ``<what> 'k' (allowed: ...)``."""
    unknown = set(raw) - allowed
    if unknown:
        k = sorted(unknown)[0]
        raise SuiteError(path, _line(raw, k), f"{what} {k!r} (allowed: {shown or ', '.join(sorted(allowed))})")


def _parse_input(path, raw, idx, case_name) -> InputSpec:
    line = _line(raw)
    if not isinstance(raw, dict):
        raise SuiteError(path, line, f"case {case_name!r}: input #{idx} must be a mapping "
                         f"with at least 'shape'")
    _check_keys(path, raw, INPUT_KEYS, f"case {case_name!r}: unknown input key")
    if "shape" not in raw:
        raise SuiteError(path, line, f"case {case_name!r}: input #{idx} has no 'shape'")
    shape = raw["shape"]
    if isinstance(shape, (int, str)):
        shape = [shape]
    if not isinstance(shape, list):
        raise SuiteError(path, _line(raw, "shape"), f"case {case_name!r}: shape must be a list")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, str)):
            raise SuiteError(path, _line(raw, "shape"),
                             f"case {case_name!r}: shape entry {d!r} is not an int or a name")
        if isinstance(d, str):
            _check_expr(path, _line(raw, "shape"), d, f"case {case_name!r} shape")
    dtype = raw.get("dtype")
    if dtype is not None and str(dtype) not in DTYPES:
        raise SuiteError(path, _line(raw, "dtype"), f"case {case_name!r}: unknown dtype {dtype!r}")
    init = raw.get("init")
    if init is None:
        d = DTYPES.get(str(dtype)) if dtype else None
        init = ("bool" if d is torch.bool else "randint") if d is not None and \
            not (d.is_floating_point or d.is_complex) else "randn"
    if init not in INITS:
        raise SuiteError(path, _line(raw, "init"),
                         f"case {case_name!r}: unknown init {init!r} (one of {', '.join(INITS)})")
    for k in ("low", "high"):
        if isinstance(raw.get(k), str):
            _check_expr(path, _line(raw, k), raw[k], f"case {case_name!r} {k}")
    return InputSpec(name=str(raw.get("name", f"x{idx}")), shape=list(shape),
                     dtype=str(dtype) if dtype is not None else None, init=init,
                     low=raw.get("low"), high=raw.get("high"), grad=bool(raw.get("grad", True)),
                     scale=float(raw.get("scale", 1.0)),
                     contiguous=bool(raw.get("contiguous", True)))


def _parse_configs(path, raw_configs, case_name, case_line):
    if raw_configs is None:
        return [(["short"], [{}], None)]
    if not isinstance(raw_configs, list) or not raw_configs:
        raise SuiteError(path, _line(raw_configs, default=case_line),
                         f"case {case_name!r}: 'configs' must be a non-empty list")
    out = []
    for c in raw_configs:
        line = _line(c, default=case_line)
        if not isinstance(c, dict):
            raise SuiteError(path, line, f"case {case_name!r}: a config must be a mapping with "
                             f"'tags' and 'cross' or 'list'")
        _check_keys(path, c, CONFIG_KEYS, f"case {case_name!r}: unknown config key",
                    "tags, cross, list, dtypes")
        tags = c.get("tags", ["short"])
        if isinstance(tags, str):
            tags = [tags]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise SuiteError(path, _line(c, "tags"), f"case {case_name!r}: tags must be a list of names")
        if ("cross" in c) == ("list" in c):
            raise SuiteError(path, line, f"case {case_name!r}: a config needs exactly one of "
                             f"'cross' (a cross product) or 'list' (explicit parameter sets)")
        if "cross" in c:
            cross = c["cross"]
            if not isinstance(cross, dict):
                raise SuiteError(path, _line(c, "cross"),
                                 f"case {case_name!r}: 'cross' must map parameter names to lists")
            names = list(cross)
            values = []
            for n in names:
                v = cross[n]
                values.append(list(v) if isinstance(v, list) else [v])
                if not values[-1]:
                    raise SuiteError(path, _line(cross, n),
                                     f"case {case_name!r}: parameter {n!r} has no values")
            combos = [dict(zip(names, vals)) for vals in itertools.product(*values)]
        else:
            lst = c["list"]
            if not isinstance(lst, list) or not all(isinstance(e, dict) for e in lst):
                raise SuiteError(path, _line(c, "list"),
                                 f"case {case_name!r}: 'list' must be a list of mappings")
            combos = [dict(e) for e in lst]
            keys = [tuple(sorted(e)) for e in combos]
            if len(set(keys)) > 1:
                raise SuiteError(path, _line(c, "list"), f"case {case_name!r}: every entry of "
                                 f"'list' must set the same parameters")
        cdt = c.get("dtypes")
        if cdt is not None:
            cdt = [cdt] if isinstance(cdt, str) else cdt
            for d in cdt:
                if str(d) not in DTYPES:
                    raise SuiteError(path, _line(c, "dtypes"),
                                     f"case {case_name!r}: unknown dtype {d!r}")
            cdt = [str(d) for d in cdt]
        out.append((list(tags), combos, cdt))
    return out


def _parse_case(path, suite_name, raw) -> CaseSpec:
    line = _line(raw, default=1)
    if not isinstance(raw, dict):
        raise SuiteError(path, line, "a case must be a mapping")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise SuiteError(path, line, "case has no 'name'")
    _check_keys(path, raw, CASE_KEYS, f"case {name!r}: unknown key")
    if ("op" in raw) == ("expr" in raw):
        raise SuiteError(path, line, f"case {name!r}: needs exactly one of 'op' or 'expr'")
    key = "op" if "op" in raw else "expr"  # expr: names a callable, as op: does
    op = _check_callable(path, _line(raw, key), raw[key], f"case {name!r} {key}")
    raw_inputs = raw.get("inputs", [])
    if not isinstance(raw_inputs, list):
        raise SuiteError(path, _line(raw, "inputs"), f"case {name!r}: 'inputs' must be a list")
    inputs = [_parse_input(path, r, i, name) for i, r in enumerate(raw_inputs)]
    names = [i.name for i in inputs]
    if len(set(names)) != len(names):
        raise SuiteError(path, _line(raw, "inputs"), f"case {name!r}: input names repeat")
    dtypes = raw.get("dtypes", ["float32"])
    if isinstance(dtypes, str):
        dtypes = [dtypes]
    for d in dtypes:
        if str(d) not in DTYPES:
            raise SuiteError(path, _line(raw, "dtypes"), f"case {name!r}: unknown dtype {d!r} "
                             f"(known: {', '.join(sorted(DTYPES))})")
    for k in ("flops", "bytes", "flops_bwd", "bytes_bwd"):
        if raw.get(k) is not None:
            _check_expr(path, _line(raw, k), raw[k], f"case {name!r} {k}")
    args = raw.get("args")
    if args is not None and not isinstance(args, list):
        raise SuiteError(path, _line(raw, "args"), f"case {name!r}: 'args' must be a list")
    kwargs = raw.get("kwargs", {}) or {}
    if not isinstance(kwargs, dict):
        raise SuiteError(path, _line(raw, "kwargs"), f"case {name!r}: 'kwargs' must be a mapping")
    _walk_dollar(path, _line(raw, "args", line), args, f"case {name!r} args")
    _walk_dollar(path, _line(raw, "kwargs", line), kwargs, f"case {name!r} kwargs")
    params = raw.get("params", {}) or {}
    if not isinstance(params, dict):
        raise SuiteError(path, _line(raw, "params"), f"case {name!r}: 'params' must be a mapping")
    configs = _parse_configs(path, raw.get("configs"), name, line)
    _check_names(path, raw, name, inputs, params, configs, line)
    return CaseSpec(
        suite=suite_name, name=name, op=op, expr=None, inputs=inputs,
        args=args, kwargs=dict(kwargs), dtypes=[str(d) for d in dtypes],
        backward=bool(raw.get("backward", False)), flops=_opt_str(raw.get("flops")),
        bytes=_opt_str(raw.get("bytes")), flops_bwd=_opt_str(raw.get("flops_bwd")),
        bytes_bwd=_opt_str(raw.get("bytes_bwd")), check=bool(raw.get("check", True)),
        configs=configs, params=dict(params), path=path, line=line,
        atol=raw.get("atol"), rtol=raw.get("rtol"), count=raw.get("count"))


def _names_in(text) -> set[str]:
    return formulas.names(str(text))


def _check_names(path, raw, case_name, inputs, params, configs, line):
    """Every name a shape, bound or formula uses must be a parameter of every config."""
    known_extra = {"elem", "dtype", "device"}
    uses = []   # (names, line, what)
    for spec, raw_in in zip(inputs, raw.get("inputs", [])):
        for d in spec.shape:
            if isinstance(d, str):
                uses.append((_names_in(d), _line(raw_in, "shape"), f"input {spec.name!r} shape"))
        for k in ("low", "high"):
            v = getattr(spec, k)
            if isinstance(v, str):
                uses.append((_names_in(v), _line(raw_in, k), f"input {spec.name!r} {k}"))
    for k in ("flops", "bytes", "flops_bwd", "bytes_bwd"):
        if raw.get(k) is not None:
            uses.append((_names_in(raw[k]), _line(raw, k), k))
    raw_cfgs = raw.get("configs") or []
    for ci, (_, combos, _) in enumerate(configs):
        cline = _line(raw_cfgs[ci], default=line) if ci < len(raw_cfgs) else line
        for combo in combos:
            have = set(params) | set(combo) | known_extra
            for names, uline, what in uses:
                missing = sorted(names - have)
                if missing:
                    raise SuiteError(path, cline, f"case {case_name!r}: {what} (line {uline}) uses "
                                     f"{', '.join(missing)}, which this config does not set "
                                     f"(it sets: {', '.join(sorted(set(params) | set(combo))) or 'nothing'})")


def _opt_str(v):
    return None if v is None else str(v)


def parse_suite(text: str, path: str = "<string>") -> Suite:
    """Parse one suite from YAML text; ``path`` is used in error messages."""
    loader = _Loader(text)
    loader.name = path
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        msg = e.problem or str(e)
        if e.context:
            where = ""
            if e.context_mark is not None and e.problem_mark is not None and \
                    e.context_mark.line != e.problem_mark.line:
                where = f" that starts at line {e.context_mark.line + 1}"
            msg = f"{msg} ({e.context}{where})"
        raise SuiteError(path, line, f"YAML syntax error: {msg}") from None
    except yaml.YAMLError as e:
        raise SuiteError(path, None, f"YAML error: {e}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SuiteError(path, _line(data, default=1), "a suite file must be a mapping with 'cases'")
    _check_keys(path, data, SUITE_KEYS, "unknown top-level key")
    default_name = os.path.splitext(os.path.basename(path))[0]
    name = str(data.get("suite", default_name))
    cases_raw = data.get("cases")
    if not isinstance(cases_raw, list) or not cases_raw:
        raise SuiteError(path, _line(data, "cases", 1), "'cases' must be a non-empty list")
    cases = [_parse_case(path, name, c) for c in cases_raw]
    seen = {}
    for c in cases:
        if c.name in seen:
            raise SuiteError(path, c.line, f"case name {c.name!r} repeats (first at line {seen[c.name]})")
        seen[c.name] = c.line
    return Suite(name=name, path=path, description=str(data.get("description", "")), cases=cases)


def load_suite(path: str) -> Suite:
    with open(path, encoding="utf-8") as f:
        return parse_suite(f.read(), path)


def builtin_suite_paths() -> list[str]:
    return sorted(os.path.join(SUITE_DIR, f) for f in os.listdir(SUITE_DIR)
                  if f.endswith((".yaml", ".yml")))


def load_suites(paths: list[str] | None = None) -> list[Suite]:
    """Built-in suites (by default), suite files, or directories of them."""
    files = []
    for p in paths or [SUITE_DIR]:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith((".yaml", ".yml")))
        elif os.path.exists(p):
            files.append(p)
        elif os.path.exists(os.path.join(SUITE_DIR, p + ".yaml")):
            files.append(os.path.join(SUITE_DIR, p + ".yaml"))
        else:
            raise SuiteError(p, None, "no such suite file or built-in suite")
    return [load_suite(f) for f in files]


# ---------------------------------------------------------------- expansion
def eval_expr(text, env: dict):
    """A suite formula's value over ``env`` (formulas.evaluate: arithmetic, never Python)."""
    return formulas.evaluate(text, env)


def expand(suites: list[Suite], tags: list[str] | None = None, operators: list[str] | None = None,
           dtypes: list[str] | None = None, forward_only: bool = False,
           test_name: list[str] | None = None) -> list[Test]:
    """All tests of the suites, filtered. ``tags=None`` or ["all"] keeps every tag."""
    import fnmatch
    tests, seen = [], set()
    want_dtypes = {str(DTYPES[d]) for d in dtypes} if dtypes else None
    for suite in suites:
        for case in suite.cases:
            if operators and not any(
                    o in (case.name, case.suite, case.full_name) or fnmatch.fnmatch(case.full_name, o)
                    for o in operators):
                continue
            for ctags, combos, cdtypes in case.configs:
                if tags and "all" not in tags and not set(tags) & set(ctags):
                    continue
                for combo in combos:
                    params = {**case.params, **combo}
                    for dt in (cdtypes or case.dtypes):
                        if want_dtypes and str(DTYPES[dt]) not in want_dtypes:
                            continue
                        modes = ["fwd"] + (["fwd+bwd"] if case.backward and not forward_only else [])
                        for mode in modes:
                            t = Test(case, params, dt, mode, list(ctags))
                            if t.id in seen:
                                continue
                            if test_name and not any(n in t.id or fnmatch.fnmatch(t.id, n)
                                                     for n in test_name):
                                continue
                            seen.add(t.id)
                            tests.append(t)
    return tests

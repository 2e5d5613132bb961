"""What a suite file may compute and call: suite files are data, never Python.

*Formulas* (``flops``, ``bytes``, shape entries, ``low``/``high``, ``$...``
arguments) are read by a small evaluator over Python's expression syntax that
knows only: numbers (and strings as arguments of ``int``/``float``), the names
the suite declares (its parameters and inputs, ``elem``, ``dtype``,
``device``), ``+ - * / // % **``, unary ``-``/``+``, comparisons, ``and``/``or``/
``not``, ``a if c else b``, parentheses, lists/tuples, the functions in
``FUNCTIONS``, ``math.<name>`` for the names in ``MATH``, and ``torch.<name>``
when it is a dtype, memory format or layout (``$torch.float16``). Arithmetic
takes numbers only; anything else (attributes of values, subscripts, other
calls, lambdas, comprehensions, ...) is refused before evaluation, so no formula
reaches Python objects (``().__class__.__base__.__subclasses__()`` is refused).

*Callables* (``op:``, and ``expr:``, which names one too) are dotted names on
an allowlisted root (``ROOTS``), looked up attribute by attribute through torch's
operator namespaces only: no calls, subscripts or names starting with ``_`` (but
aten's operators, ``aten._softmax``); ``torch.os.system`` is refused: ``os`` is not
a torch namespace.
"""
from __future__ import annotations

import ast
import functools
import math
import operator
import re
import types

import torch


class FormulaError(ValueError):
    """A formula or callable name a suite file may not use; the message says why."""


FUNCTIONS = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round,
             "prod": math.prod, "sum": sum, "len": len}
MATH = {"sqrt", "log", "log2", "log10", "exp", "ceil", "floor", "pi", "e", "inf", "tau"}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
        ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_NUMBER = (int, float, complex)  # bool is an int
_TORCH_VALUES = (torch.dtype, torch.memory_format, torch.layout)
_MAX_POW_BITS = 1 << 16  # an integer power larger than this many bits is refused (10**10**10)


def _attr_path(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _check(node: ast.AST, text: str) -> None:
    def bad(what: str):
        raise FormulaError(f"{what} is not allowed in a suite formula ({text!r}); formulas are "
                           f"arithmetic over the suite's names")

    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (*_NUMBER, str, type(None))):
            bad(f"the constant {node.value!r}")
    elif isinstance(node, ast.Name):
        if node.id.startswith("_"):
            bad(f"the name {node.id!r}")
    elif isinstance(node, ast.Attribute):
        path = _attr_path(node)
        if path is None or any(p.startswith("_") for p in path) or not (
                (path[0] == "math" and len(path) == 2 and path[1] in MATH)
                or (path[0] == "torch" and len(path) == 2)):
            bad(f"the attribute {ast.unparse(node)!r} (only math.<{', '.join(sorted(MATH))}> and "
                "torch.<dtype, memory format or layout>)")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BIN:
            bad(f"the operator {type(node.op).__name__}")
        _check(node.left, text)
        _check(node.right, text)
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            bad(f"the operator {type(node.op).__name__}")
        _check(node.operand, text)
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, text)
    elif isinstance(node, ast.Compare):
        if any(type(op) not in _CMP for op in node.ops):
            bad("a comparison other than == != < <= > >=")
        for v in (node.left, *node.comparators):
            _check(v, text)
    elif isinstance(node, ast.IfExp):
        for v in (node.test, node.body, node.orelse):
            _check(v, text)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for v in node.elts:
            _check(v, text)
    elif isinstance(node, ast.Call):
        path = _attr_path(node.func)
        ok = path is not None and (
            (len(path) == 1 and path[0] in FUNCTIONS) or (len(path) == 2 and path[0] == "math"
                                                          and path[1] in MATH))
        if not ok or node.keywords:
            bad(f"the call {ast.unparse(node)!r} (only {', '.join(FUNCTIONS)} and math.<name>, "
                "without keywords)")
        for a in node.args:
            if isinstance(a, ast.Starred):
                bad("*arguments")
            _check(a, text)
    else:
        bad(type(node).__name__)


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> ast.Expression:
    """The checked syntax tree of a formula; FormulaError (a SyntaxError's message, or what is
    not allowed) otherwise."""
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as e:
        raise FormulaError(f"invalid expression {text!r} ({e.msg})") from None
    _check(tree.body, str(text))
    return tree


def names(text: str) -> set[str]:
    """The names a formula reads from the suite (not functions, math or torch)."""
    out = set()
    for node in ast.walk(parse(text).body):
        if isinstance(node, ast.Name):
            out.add(node.id)
    for node in ast.walk(parse(text).body):
        if isinstance(node, ast.Call):
            path = _attr_path(node.func)
            if path and len(path) == 1:
                out.discard(path[0])
        if isinstance(node, ast.Attribute):
            path = _attr_path(node)
            if path:
                out.discard(path[0])
    return out


def _number(v, text):
    if isinstance(v, _NUMBER):
        return v
    raise FormulaError(f"arithmetic on {type(v).__name__} in {text!r}: only numbers")


def _eval(node: ast.AST, env: dict, text: str):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise FormulaError(f"{text!r} uses {node.id!r}, which the suite does not declare")
    if isinstance(node, ast.Attribute):
        root, name = _attr_path(node)
        if root == "math":
            value = getattr(math, name)
            if callable(value):
                raise FormulaError(f"math.{name} in {text!r} is a function: call it")
            return value
        value = getattr(torch, name, None)
        if not isinstance(value, _TORCH_VALUES):
            raise FormulaError(f"torch.{name} in {text!r} is not a dtype, memory format or layout")
        return value
    if isinstance(node, ast.BinOp):
        left = _number(_eval(node.left, env, text), text)
        right = _number(_eval(node.right, env, text), text)
        if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int) \
                and abs(left) > 1 and right > 0 and right * abs(left).bit_length() > _MAX_POW_BITS:
            raise FormulaError(f"{text!r}: {left}**{right} is too large")
        try:
            return _BIN[type(node.op)](left, right)
        except OverflowError as e:
            raise FormulaError(f"{text!r}: {e}") from None
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, text)
        return not v if isinstance(node.op, ast.Not) else _UNARY[type(node.op)](_number(v, text))
    if isinstance(node, ast.BoolOp):
        v = None
        for sub in node.values:
            v = _eval(sub, env, text)
            if (not v) if isinstance(node.op, ast.And) else bool(v):
                return v
        return v
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env, text)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, text) else node.orelse, env, text)
    if isinstance(node, ast.Tuple):
        return tuple(_eval(v, env, text) for v in node.elts)
    if isinstance(node, ast.List):
        return [_eval(v, env, text) for v in node.elts]
    # a call (checked: a function of FUNCTIONS, or math.<name>)
    path = _attr_path(node.func)
    fn = FUNCTIONS[path[0]] if len(path) == 1 else getattr(math, path[1])
    args = [_eval(a, env, text) for a in node.args]
    for a in args:
        if isinstance(a, str) and fn not in (int, float):
            raise FormulaError(f"{text!r}: strings are arguments of int() and float() only")
    return fn(*args)


def evaluate(text, env: dict):
    """The value of formula ``text`` over the names in ``env``."""
    return _eval(parse(str(text)).body, env, str(text))


# ------------------------------------------------------------------------------ callables
def _roots() -> dict:
    from torch_musa.op_benchmark import composites
    return {"torch": torch, "F": torch.nn.functional, "nn": torch.nn, "Tensor": torch.Tensor,
            "aten": torch.ops.aten, "bench": composites}


ROOTS = ("torch", "F", "nn", "Tensor", "aten", "bench")
#: The modules a name may pass through (besides torch.ops, its operator namespaces and
#: operators' overload packets, and torch.Tensor).
NAMESPACES = ("torch", "torch.nn", "torch.nn.functional", "torch.special", "torch.linalg",
              "torch.fft", "torch_musa.op_benchmark.composites")
#: torch.ops namespaces a suite may not use (operators on file descriptors).
DENIED_OP_NAMESPACES = ("musa_ipc",)
#: Callables a suite may not name whatever their namespace: they read or write files.
DENIED = re.compile(r"file|load|save", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def check_callable_name(text) -> str:
    """``text`` if it is a dotted name a suite may use as ``op``/``expr``; FormulaError if not."""
    name = str(text).strip() if isinstance(text, str) else None
    if not name or not _NAME.fullmatch(name):
        raise FormulaError(
            f"{text!r} is not the dotted name of a callable (such as torch.add, F.gelu, "
            f"Tensor.sum, aten.add.Tensor or bench.rms_norm); suite files are data: expressions "
            f"are not evaluated, compose ops in torch_musa/op_benchmark/composites.py")
    parts = name.split(".")
    if parts[0] not in ROOTS:
        raise FormulaError(f"{name!r}: a callable's name starts with one of {', '.join(ROOTS)}")
    op_index = 1 if parts[0] == "aten" else 3 if parts[:2] == ["torch", "ops"] else None
    for i, part in enumerate(parts):
        # operators may start with one underscore (aten._softmax); nothing else may
        if part.startswith("_") and (i != op_index or part.startswith("__")):
            raise FormulaError(f"{name!r}: {part!r} is private; only operators (torch.ops.<namespace>."
                               f"<op>, aten.<op>) may start with _")
    if parts[:2] == ["torch", "ops"] and len(parts) > 2 and parts[2] in DENIED_OP_NAMESPACES:
        raise FormulaError(f"{name!r}: torch.ops.{parts[2]} is internal to torch_musa")
    if DENIED.search(name):
        raise FormulaError(f"{name!r}: callables that read or write files are not allowed")
    return name


def _namespace(obj) -> bool:
    if obj is torch.ops or obj is torch.Tensor or isinstance(
            obj, (torch._ops._OpNamespace, torch._ops.OpOverloadPacket)):  # (these are modules too)
        return True
    return isinstance(obj, types.ModuleType) and obj.__name__ in NAMESPACES


def resolve_callable(text):
    """The callable a suite names, looked up attribute by attribute through allowed namespaces."""
    name = check_callable_name(text)
    parts = name.split(".")
    obj = _roots()[parts[0]]
    for i, p in enumerate(parts[1:], 1):
        if not _namespace(obj):
            raise FormulaError(f"{name!r}: {'.'.join(parts[:i])} is not a namespace a suite may "
                               f"look into")
        try:
            obj = getattr(obj, p)
        except AttributeError:
            raise FormulaError(f"{name!r}: {'.'.join(parts[:i])} has no {p!r}") from None
    if isinstance(obj, types.ModuleType) or not callable(obj):
        raise FormulaError(f"{name!r} is not callable")
    return obj

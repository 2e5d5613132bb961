"""libcst passes: a statement, a compound statement's header or an expression
wrapped as a module of its own, many of them per parse (batching)."""
from __future__ import annotations

from collections import Counter

import libcst as cst

from torch_musa.cuda_mapping import Table
from torch_musa.utils.musa_converter.python_rewriter.rewriter import _Rewriter


def _transform(code: str, t: Table, name_map: dict[str, str], counts: Counter,
               header: tuple | None = None) -> str:
    indent = code[: len(code) - len(code.lstrip(" \t"))]
    if header is not None:
        body_indent, elif_, _ = header
        nl = "\r\n" if code.split("\n", 1)[0].endswith("\r") else "\n"
        if not code.endswith("\n"):
            code += nl
        if elif_:
            code = indent + code[len(indent) + 2:]   # "elif" -> "if"
        code = code + body_indent + "pass" + nl
    wrapped = bool(indent)
    src = ("if True:\n" + code) if wrapped else code
    module = cst.parse_module(src)
    rw = _Rewriter(t, name_map)
    new = module.visit(rw).code
    counts.update(rw.counts)
    new = new[len("if True:\n"):] if wrapped else new
    if header is not None:
        tail = body_indent + "pass" + nl
        if not new.endswith(tail):
            raise ValueError("header rewrite lost its placeholder body")
        new = new[: len(new) - len(tail)]
        if elif_:
            new = indent + "el" + new[len(indent):]
    return new


_EMPTY = cst.Module(body=[])


def _wrap(code: str, hdr) -> tuple[str, object]:
    """``code`` as one top-level statement, and how to get it back."""
    if hdr is not None and hdr[0] == "expr":
        def unwrap_expr(out: str) -> str:
            if not (out.startswith("(") and out.endswith(")\n")):
                raise ValueError("expression rewrite lost its parentheses")
            return out[1:-2]
        return "(" + code + ")\n", unwrap_expr
    indent = code[: len(code) - len(code.lstrip(" \t"))]
    nl = "\r\n" if code.split("\n", 1)[0].endswith("\r") else "\n"
    tail = ""
    if hdr is not None:
        body_indent, elif_, _ = hdr
        if not code.endswith("\n"):
            code += nl
        if elif_:
            code = indent + code[len(indent) + 2:]   # "elif" -> "if"
        tail = body_indent + "pass" + nl
        code += tail
    else:
        elif_ = False
    head = "if True:" + nl if indent else ""

    def unwrap(out: str) -> str:
        if not out.startswith(head) or not out.endswith(tail):
            raise ValueError("statement rewrite lost its wrapper")
        out = out[len(head): len(out) - len(tail)]
        if elif_:
            out = indent + "el" + out[len(indent):]
        return out
    return head + code, unwrap


_BATCH = 256   # pieces per libcst parse: amortises its fixed cost, bounds its memory


def _transform_batch(pieces, t: Table, name_map: dict[str, str], counts: Counter) -> list[str]:
    """Rewrite many statements, ``_BATCH`` at a time with one libcst parse
    each (a parse has a fixed cost of ~0.5 ms, and a libcst tree takes ~30 KB
    a line, so one parse of a whole big file would need gigabytes)."""
    outs: list[str] = []
    for i in range(0, len(pieces), _BATCH):
        outs += _transform_group(pieces[i:i + _BATCH], t, name_map, counts)
    return outs


def _transform_group(pieces, t: Table, name_map: dict[str, str], counts: Counter) -> list[str]:
    """One libcst parse for ``pieces``; one parse per piece if that fails."""
    if not pieces:
        return []
    wrapped = [_wrap(code, hdr) for code, hdr in pieces]
    if len(pieces) > 1:
        try:
            module = cst.parse_module("".join(w for w, _ in wrapped))
        except Exception:
            module = None
        if module is not None and len(module.body) == len(pieces):
            rw = _Rewriter(t, name_map)
            new = module.visit(rw)
            outs = [unwrap(new.code_for_node(stmt)) for stmt, (_, unwrap) in zip(new.body, wrapped)]
            counts.update(rw.counts)
            return outs
    outs = []
    for (code, hdr), (w, unwrap) in zip(pieces, wrapped):
        if hdr is not None and hdr[0] == "expr":
            outs.append(_transform_expr(code, t, name_map, counts))
        else:
            outs.append(_transform(code, t, name_map, counts, hdr))
    return outs


def _transform_expr(code: str, t: Table, name_map: dict[str, str], counts: Counter) -> str:
    node = cst.parse_expression("(" + code + ")")
    rw = _Rewriter(t, name_map)
    new = _EMPTY.code_for_node(node.visit(rw))
    counts.update(rw.counts)
    if not (new.startswith("(") and new.endswith(")")):
        raise ValueError("expression rewrite lost its parentheses")
    return new[1:-1]

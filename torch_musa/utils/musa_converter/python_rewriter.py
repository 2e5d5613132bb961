"""CUDA -> MUSA rewriting of Python sources through a concrete syntax tree.

Only names, attributes, calls, strings, f-strings and comments that match a
rule of the mapping table change; everything else (formatting, comments,
quoting) is kept byte for byte.

Speed: libcst parses ~8k lines/s, too slow for large trees, so a file is
first scanned for the table's trigger words (substring search, then whole
identifiers); files without a hit are not parsed at all. For the others the
standard ``ast`` (C) locates the smallest unit that holds each hit: a
statement, only the header of a compound statement, or, inside a long
statement such as a big literal, the smallest expression that starts a line.
Those units go through libcst together, as one synthetic module (an indented
statement sits under an ``if True:`` header, an expression in parentheses),
which keeps their text exact. Every rule is local to such a unit, so the
result equals a whole-file rewrite (tests check this on PyTorch's sources).
"""
from __future__ import annotations

import ast
import bisect
import gc
import io
import itertools
import functools
import re
from collections import Counter
from dataclasses import dataclass, field

import libcst as cst

from torch_musa.cuda_mapping import Table, load_table
from torch_musa.utils.musa_converter.text import restore_eols, split_eols

LAUNCH_IMPORT = "import torch_musa"


@dataclass
class PyResult:
    source: str
    counts: Counter = field(default_factory=Counter)
    review: list = field(default_factory=list)   # dicts: line, id, text

    @property
    def changed(self) -> bool:
        return bool(self.counts)


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _ast_dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


@functools.lru_cache(maxsize=256)
def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


_STR_PREFIX = re.compile(r"^([A-Za-z]*)('''|\"\"\"|'|\")")


class _Rewriter(cst.CSTTransformer):
    def __init__(self, table: Table, name_map: dict[str, str]):
        super().__init__()
        self.t = table
        self.name_map = name_map
        self.counts: Counter = Counter()
        self._no_rename: set[int] = set()

    # -- names that must not be renamed as bare identifiers ----------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._no_rename.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._no_rename.add(id(node.keyword))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                self._no_rename.add(id(alias.name))
                if alias.asname is not None:
                    self._no_rename.add(id(alias.asname.name))

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        new = self.name_map.get(updated.value)
        if new and id(original) not in self._no_rename:
            self.counts["py.import-name:" + updated.value] += 1
            return updated.with_changes(value=new)
        return updated

    # -- dotted names and attributes ---------------------------------------
    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        name = _dotted(updated)
        if name is not None and name in self.t.dotted:
            self.counts["py.dotted:" + name] += 1
            new = _expr(self.t.dotted[name])
            return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
        attr = updated.attr.value
        if attr in self.t.attributes and not (name or "").startswith("torch."):
            self.counts["py.attribute:" + attr] += 1
            return updated.with_changes(attr=cst.Name(self.t.attributes[attr]))
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        name = _dotted(func)
        rule = self.t.calls.get(name) if name else None
        if rule is not None:
            self.counts["py.call:" + rule["source"]] += 1
            self._undo_dotted(rule["source"])
            args = list(updated.args)
            names = rule.get("keywords") or ()
            for i, a in enumerate(args):
                if i < len(names) and a.keyword is None and not a.star:
                    args[i] = a.with_changes(keyword=cst.Name(names[i]),
                                             equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                                                                   cst.SimpleWhitespace("")))
            if rule.get("prepend"):
                args.insert(0, cst.Arg(value=_expr(rule["prepend"])))
            for kw, value in (rule.get("keywords_add") or {}).items():
                if not any(a.keyword is not None and a.keyword.value == kw for a in args):
                    args.append(cst.Arg(value=_expr(value), keyword=cst.Name(kw),
                                        equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                                                              cst.SimpleWhitespace(""))))

            return updated.with_changes(func=_expr(rule["to"]), args=args)
        if isinstance(func, cst.Attribute) and func.attr.value in self.t.methods:
            if not (name or "").startswith("torch."):
                self.counts["py.method:" + func.attr.value] += 1
                return updated.with_changes(
                    func=func.with_changes(attr=cst.Name(self.t.methods[func.attr.value])))
        return updated

    def leave_Decorator(self, original: cst.Decorator, updated: cst.Decorator):
        name = _dotted(updated.decorator)
        new = self.t.decorators.get(name) if name else None
        if new is None:
            return updated
        src = next(k for k, v in self.t.raw["python"]["decorators"].items() if v == new)
        self.counts["py.decorator:" + src] += 1
        self._undo_dotted(src)
        return updated.with_changes(decorator=_expr(new))

    def _undo_dotted(self, source: str) -> None:
        # The callee's own dotted rewrite (torch.cuda -> torch.musa) is replaced
        # by a call/decorator rule: do not count it twice.
        parts = source.split(".")
        for i in range(1, len(parts)):
            key = "py.dotted:" + ".".join(parts[:i])
            if key[len("py.dotted:"):] in self.t.dotted and self.counts.get(key):
                self.counts[key] -= 1
                if not self.counts[key]:
                    del self.counts[key]

    # -- imports -------------------------------------------------------------
    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom):
        if updated.relative or updated.module is None or isinstance(updated.names, cst.ImportStar):
            return updated
        module = _dotted(original.module)
        rule = self.t.imports.get(module)
        if rule is not None and all(a.name.value in rule["names"] for a in updated.names):
            names = [a.with_changes(name=cst.Name(rule["names"][a.name.value])) for a in updated.names]
            self.counts["py.import:" + module] += 1
            return updated.with_changes(module=_expr(rule["to"]), names=names)
        new_mod = _dotted(updated.module)
        names, changed = [], False
        for a in updated.names:
            full = f"{new_mod}.{a.name.value}" if isinstance(a.name, cst.Name) else None
            target = self.t.dotted.get(full) if full else None
            if target and target.rsplit(".", 1)[0] == new_mod:
                changed = True
                self.counts["py.dotted:" + full] += 1
                asname = a.asname or cst.AsName(name=cst.Name(a.name.value))
                a = a.with_changes(name=cst.Name(target.rsplit(".", 1)[1]), asname=asname)
            names.append(a)
        return updated.with_changes(names=names) if changed else updated

    # -- strings and comments ------------------------------------------------
    def _text(self, text: str, full: bool) -> str:
        if full:
            for rid, pat, to in self.t.string_rules:
                m = pat.fullmatch(text)
                if m:
                    self.counts["py." + rid] += 1
                    return m.expand(to)
        if self.t.string_token_re is not None:
            def sub(m):
                self.counts["py.string-token:" + m.group(0)] += 1
                return self.t.string_tokens[m.group(0)]
            text = self.t.string_token_re.sub(sub, text)
        return text

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        m = _STR_PREFIX.match(updated.value)
        if not m or "b" in m.group(1).lower():
            return updated
        pre, q = m.group(0), m.group(2)
        inner = updated.value[len(pre):len(updated.value) - len(q)]
        new = self._text(inner, full=True)
        return updated if new == inner else updated.with_changes(value=pre + new + q)

    def leave_FormattedString(self, original, updated: cst.FormattedString):
        parts = list(updated.parts)
        changed = False
        for i, p in enumerate(parts):
            if not isinstance(p, cst.FormattedStringText):
                continue
            # A device string built with an f-string: f"cuda:{rank}".
            lead = i == 0 and len(parts) > 1 and p.value.endswith(":")
            new = self._text(p.value, full=lead)
            if new != p.value:
                parts[i] = p.with_changes(value=new)
                changed = True
        return updated.with_changes(parts=parts) if changed else updated

    def leave_Comment(self, original: cst.Comment, updated: cst.Comment):
        new = comment_text(self.t, updated.value, self.counts)
        return updated if new == updated.value else updated.with_changes(value=new)


def comment_text(t: Table, text: str, counts: Counter) -> str:
    if t.comment_token_re is None:
        return text

    def sub(m):
        counts["py.comment-token:" + m.group(0)] += 1
        return t.comment_tokens[m.group(0)]
    return t.comment_token_re.sub(sub, text)


# --------------------------------------------------------------------------
# Locating the statements to rewrite
# --------------------------------------------------------------------------

def _span(node: ast.stmt) -> tuple[int, int]:
    start = node.lineno
    for d in getattr(node, "decorator_list", ()):
        start = min(start, d.lineno)
    return start, node.end_lineno


def _bodies(node) -> list[list[ast.stmt]]:
    out = []
    for attr in ("body", "orelse", "finalbody"):
        v = getattr(node, attr, None)
        if isinstance(v, list) and v and isinstance(v[0], ast.stmt):
            out.append(v)
    for h in getattr(node, "handlers", ()):
        out.append(h.body)
    for c in getattr(node, "cases", ()):
        out.append(c.body)
    return out


class _Locator:
    def __init__(self, tree: ast.Module, lines: list[str]):
        self.tree = tree
        self.lines = lines
        self._starts: dict[int, list[int]] = {}
        self._strings: dict[int, list] = {}

    def _find(self, body: list[ast.stmt], line: int):
        key = id(body)
        starts = self._starts.get(key)
        if starts is None:
            starts = self._starts[key] = [_span(s)[0] for s in body]
        i = bisect.bisect_right(starts, line) - 1
        if i >= 0:
            s = body[i]
            if _span(s)[1] >= line:
                return i, s
        return None

    def path(self, line: int) -> list[tuple[list[ast.stmt], int, ast.stmt]]:
        """Statements enclosing ``line``, outermost first (body, index, node)."""
        out = []
        bodies = [self.tree.body]
        while bodies:
            hit = None
            for body in bodies:
                f = self._find(body, line)
                if f:
                    hit = (body, f[0], f[1])
                    break
            if hit is None:
                break
            out.append(hit)
            bodies = _bodies(hit[2])
        return out

    def _valid(self, body, idx, node) -> bool:
        start, end = _span(node)
        text = self.lines[start - 1]
        stripped = text.lstrip()
        if isinstance(node, ast.If) and stripped.startswith("elif"):
            return False
        if getattr(node, "decorator_list", None):
            if not stripped.startswith("@"):
                return False
        elif node.col_offset != len(text.encode("utf-8")) - len(stripped.encode("utf-8")):
            return False
        if idx + 1 < len(body) and _span(body[idx + 1])[0] <= end:
            return False
        return True

    def chunk(self, line: int, hits=()):
        """Where the rewrite of ``line`` happens: ``(start, end, None)`` for
        the smallest standalone statement holding it; ``(start, end, hdr)``
        for just the header of a compound statement (its body is rewritten on
        its own); ``"comment"`` for a comment line outside any simple
        statement; ``"blank"``; ``None`` for the whole file."""
        path = self.path(line)
        if not path or isinstance(path[-1][2], _COMPOUND):
            if self.lines[line - 1].lstrip().startswith("#"):
                return "comment"
            if not path:
                return "blank" if not self.lines[line - 1].strip() else None
            body, idx, node = path[-1]
            hdr = self._header(body, idx, node, line)
            if hdr is not None:
                return hdr
        for body, idx, node in reversed(path):
            if self._valid(body, idx, node):
                span = _span(node)
                if hits and span[1] - span[0] >= _BIG and not isinstance(node, _COMPOUND):
                    sub = self._expr_chunk(node, line, hits)
                    if sub is not None:
                        return sub
                return (*span, None)
        return None

    def _ml_strings(self, stmt):
        key = id(stmt)
        spans = self._strings.get(key)
        if spans is None:
            spans = self._strings[key] = [
                (n.lineno, n.end_lineno) for n in ast.walk(stmt)
                if isinstance(n, (ast.Constant, ast.JoinedStr)) and n.end_lineno > n.lineno]
        return spans

    def _expr_chunk(self, stmt, line, hits):
        """In a long simple statement (a big literal), the smallest expression
        that starts a line and holds every hit of ``line``."""
        text = self.lines[line - 1]
        if text.lstrip().startswith("#"):
            if not any(s < line <= e for s, e in self._ml_strings(stmt)):
                return "comment"
            return None
        lo = len(text[: min(h[0] for h in hits)].encode())
        hi = len(text[: max(h[1] for h in hits)].encode())
        path = []
        node = stmt
        while True:
            for child in _expr_children(node):
                if (child.lineno, child.col_offset) <= (line, lo) and \
                        (child.end_lineno, child.end_col_offset) >= (line, hi):
                    path.append(child)
                    node = child
                    break
            else:
                break
            if isinstance(node, ast.JoinedStr):   # positions inside f-strings are unreliable
                break
        for node in reversed(path):
            first = self.lines[node.lineno - 1]
            indent = len(first) - len(first.lstrip())
            if node.col_offset != indent:
                continue
            last = self.lines[node.end_lineno - 1].encode()
            ecol = len(last[: node.end_col_offset].decode())
            return (node.lineno, node.end_lineno, ("expr", indent, ecol, node))
        return None

    def _header(self, body, idx, node, line):
        if not isinstance(node, _HEADERED) or not node.body:
            return None
        start = _span(node)[0]
        first = _span(node.body[0])[0]
        if not (start <= line < first) or first <= node.lineno:
            return None
        text = self.lines[node.lineno - 1].lstrip()
        elif_ = isinstance(node, ast.If) and text.startswith("elif")
        if not elif_ and not self._valid(body, idx, node):
            return None
        first_text = self.lines[first - 1]
        indent = first_text[: len(first_text) - len(first_text.lstrip(" \t"))]
        b0 = node.body[0]
        if not getattr(b0, "decorator_list", None) and b0.col_offset != len(indent.encode()):
            return None   # `def f(...) -> T: ...`: the body shares the header's last line
        return (start, first - 1, (indent, elif_, node))


_BIG = 20   # statements at least this long are split into expressions


def _expr_children(node):
    for c in ast.iter_child_nodes(node):
        if isinstance(c, ast.expr):
            yield c
        elif isinstance(c, (ast.keyword, ast.comprehension, ast.arguments, ast.arg)):
            yield from _expr_children(c)


_HEADERED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
              ast.While, ast.With, ast.AsyncWith)
_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
             ast.While, ast.With, ast.AsyncWith, ast.Try, getattr(ast, "TryStar", ast.Try), ast.Match)


# --------------------------------------------------------------------------
# Review (call sites a rewrite cannot fix), on the original ast
# --------------------------------------------------------------------------

def _review(t: Table, nodes, lines: list[str], out: list, seen: set) -> None:
    norm = t.apply_dotted
    items = t.review
    compares = [i for i in items if i.kind == "compare"]
    calls = {norm(n): i for i in items if i.kind == "call" for n in i.detect["names"]}
    attrs = {norm(n): i for i in items if i.kind == "attribute" for n in i.detect["names"]}
    imports = {n: i for i in items if i.kind == "import" for n in i.detect["names"]}
    iftests = {norm(n): i for i in items if i.kind == "if-test" for n in i.detect["names"]}
    strings = [(w, i) for i in items if i.kind == "string" for w in i.detect["words"]]

    def add(node, item):
        key = (node.lineno, item.id)
        if key not in seen:
            seen.add(key)
            out.append({"line": node.lineno, "id": item.id,
                        "text": lines[node.lineno - 1].strip()[:160]})

    exempt: set[int] = set()
    for root in nodes:
        for node in ast.walk(root):
            if id(node) in exempt:
                continue
            if isinstance(node, ast.Call):
                n = _ast_dotted(node.func)
                if n is not None and norm(n) in t.calls:
                    exempt.update(id(x) for x in ast.walk(node.func))
            for d in getattr(node, "decorator_list", ()):
                n = _ast_dotted(d)
                if n is not None and norm(n) in t.decorators:
                    exempt.update(id(x) for x in ast.walk(d))
            if isinstance(node, ast.Compare):
                sides = [node.left] + node.comparators
                lits = {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
                for item in compares:
                    if not lits & set(item.detect.get("literals", ())):
                        continue
                    want = item.detect.get("attrs")
                    if want and not any(isinstance(s, ast.Attribute) and s.attr in want for s in sides) \
                            and not any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                        continue
                    add(node, item)
            elif isinstance(node, ast.Call):
                name = _ast_dotted(node.func)
                if name is not None:
                    item = calls.get(norm(name)) or (calls.get(name.rsplit(".", 1)[-1])
                                                     if "." not in name else None)
                    if item:
                        add(node, item)
            elif isinstance(node, ast.Attribute):
                name = _ast_dotted(node)
                item = attrs.get(norm(name)) if name else None
                item = item or attrs.get(node.attr)
                if item:
                    add(node, item)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for m in mods:
                    item = imports.get(m.split(".")[0]) or attrs.get(norm(m))
                    if item:
                        add(node, item)
            elif isinstance(node, (ast.If, ast.IfExp)) and iftests and (
                    isinstance(node, ast.IfExp) or node.orelse):
                for sub in ast.walk(node.test):
                    if isinstance(sub, ast.Call):
                        n = _ast_dotted(sub.func)
                        item = iftests.get(norm(n)) if n else None
                        if item:
                            add(node, item)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and strings:
                for w, item in strings:
                    if w in node.value:
                        add(node, item)


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------

def _name_map(t: Table, tree: ast.Module, source: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if not any(m in source for m in t.imports):
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module in t.imports:
            rule = t.imports[node.module]
            if all(a.name in rule["names"] for a in node.names):
                for a in node.names:
                    new = rule["names"][a.name]
                    if a.asname is None and new != a.name:
                        out[a.name] = new
    return out


def _has_launch_import(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name == "torch_musa" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch_musa":
            return True
    return False


def _launch_line(tree: ast.Module) -> int:
    """0-based line index where ``import torch_musa`` goes."""
    at = None
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            at = node.end_lineno
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            at = node.end_lineno
            continue
        return at if at is not None else _span(node)[0] - 1
    return at if at is not None else -1


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


def _transform_batch(pieces, t: Table, name_map: dict[str, str], counts: Counter) -> list[str]:
    """Rewrite many statements with one libcst parse (parsing has a fixed
    cost of ~0.5 ms); falls back to one parse per statement."""
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


def _header_only(node: ast.stmt) -> ast.stmt:
    import copy
    n = copy.copy(node)
    for f in ("body", "orelse", "finalbody", "handlers"):
        if hasattr(n, f):
            setattr(n, f, [])
    return n


def convert_source(source: str, table: Table | None = None, *, launch: bool = False,
                   filename: str = "<string>") -> PyResult:
    """Rewrite one Python source text. Raises SyntaxError if it does not parse."""
    # Building syntax trees allocates millions of objects without cycles: the
    # cyclic collector only slows that down (~20%).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _convert_source(source, table or load_table(), launch, filename)
    finally:
        if enabled:
            gc.enable()


def _convert_source(source: str, t: Table, launch: bool, filename: str) -> PyResult:
    found = t.find_hits(source) if any(w in source for w in t.trigger_plain) else []
    if not found and not launch:
        return PyResult(source)
    # Rewrite text whose lines all end in "\n"; each line's own ending (\r\n,
    # bare \r, none at the end) is put back afterwards.
    norm, eols = split_eols(source)
    if eols is not None and found:
        found = t.find_hits(norm)
    tree = ast.parse(norm, filename=filename)
    lines = io.StringIO(norm, newline="").readlines()   # lines as Python counts them
    line_starts = [0, *itertools.accumulate(map(len, lines))]
    per_line: dict[int, list[tuple[int, int]]] = {}
    for a, b in found:
        ln = bisect.bisect_right(line_starts, a)
        base = line_starts[ln - 1]
        per_line.setdefault(ln, []).append((a - base, b - base))
    cand = sorted(per_line)

    counts: Counter = Counter()
    review: list = []
    loc = _Locator(tree, lines)
    chunks: list[tuple[int, int]] = []
    comment_lines: list[int] = []
    whole = False
    for ln in cand:
        c = loc.chunk(ln, per_line[ln])
        if c is None:
            whole = True
            break
        if c == "comment":
            comment_lines.append(ln)
        elif c != "blank":
            chunks.append(c)
    name_map = _name_map(t, tree, source)

    seen: set = set()
    # new_lines keeps one entry per original line: a rewritten chunk puts its
    # text in its first line's entry and empties the others.
    if whole:
        _review(t, [tree], lines, review, seen)
        new_lines = [_transform("".join(lines), t, name_map, counts)] + [""] * (len(lines) - 1)
    else:
        chunks.sort(key=lambda c: (c[0], -c[1], c[2] is not None))
        kept: list[tuple] = []
        for c in chunks:
            if kept and c[1] <= kept[-1][1]:
                continue
            kept.append(c)
        new_lines = list(lines)
        review_nodes = []
        pieces = []
        for start, end, hdr in kept:
            if hdr is not None and hdr[0] == "expr":
                _, scol, ecol, node = hdr
                first, last = lines[start - 1], lines[end - 1]
                code = first[scol:ecol] if start == end else \
                    first[scol:] + "".join(lines[start:end - 1]) + last[:ecol]
                pieces.append((code, hdr))
                review_nodes.append(node)
                continue
            pieces.append(("".join(lines[start - 1:end]), hdr))
            if hdr is not None:
                review_nodes.append(_header_only(hdr[2]))
                continue
            for _, _, node in loc.path(start):
                if _span(node) == (start, end):
                    review_nodes.append(node)
                    break
        news = _transform_batch(pieces, t, name_map, counts)
        for (start, end, hdr), (code, _), new in zip(kept, pieces, news):
            if new == code:
                continue
            if hdr is not None and hdr[0] == "expr":
                scol, ecol = hdr[1], hdr[2]
                new = lines[start - 1][:scol] + new + lines[end - 1][ecol:]
            new_lines[start - 1:end] = [new] + [""] * (end - start)
        _review(t, review_nodes, lines, review, seen)
        for ln in comment_lines:
            if any(s <= ln <= e for s, e, _ in kept):
                continue
            text = lines[ln - 1]
            i = text.index("#")
            new_lines[ln - 1] = text[:i] + comment_text(t, text[i:], counts)

    out = restore_eols("".join(new_lines), eols)
    if launch and not _has_launch_import(tree):
        at = _launch_line(tree)
        orig = io.StringIO(out, newline="").readlines()
        nl = (eols[0] or "\n") if eols else "\n"
        at = len(orig) if at < 0 else at
        if at == len(orig) and orig and not orig[-1].endswith(("\n", "\r")):
            orig[-1] += nl
        orig.insert(at, LAUNCH_IMPORT + nl)
        out = "".join(orig)
        counts["py.launch-import"] += 1
    review.sort(key=lambda r: r["line"])
    return PyResult(out if counts else source, counts, review)

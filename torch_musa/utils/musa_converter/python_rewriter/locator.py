"""Locating the statements to rewrite: the smallest unit that holds each hit
(a statement, the header of a compound statement, or an expression that starts
a line inside a long statement), on the standard ``ast``; and the ast helpers
the review and the fast path share."""
from __future__ import annotations

import ast
import bisect


def _ast_dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


_FIELDS: dict[type, tuple[str, ...]] = {}   # an ast node type's fields, without ctx


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
        self._kids: dict[int, tuple] = {}
        self._paths: dict[int, list] = {}

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
        out = self._paths.get(line)          # chunk() and then the caller ask for it
        if out is None:
            out = self._paths[line] = self._path(line)
        return out

    def _path(self, line: int) -> list[tuple[list[ast.stmt], int, ast.stmt]]:
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

    def _child_at(self, node, line, col):
        """The expression child of ``node`` that starts last at or before
        (line, col): a bisection over the children sorted by position (they
        do not overlap), so a literal with n entries costs log n per hit, not n."""
        key = id(node)
        kids = self._kids.get(key)
        if kids is None:
            order = sorted(_expr_children(node), key=lambda c: (c.lineno, c.col_offset))
            kids = self._kids[key] = ([(c.lineno, c.col_offset) for c in order], order)
        starts, order = kids
        i = bisect.bisect_right(starts, (line, col)) - 1
        return order[i] if i >= 0 else None

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
            child = self._child_at(node, line, lo)
            if child is None or (child.end_lineno, child.end_col_offset) < (line, hi):
                break
            path.append(child)
            node = child
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

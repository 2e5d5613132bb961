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
import collections
import gc
import io
import itertools
import functools
import keyword
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
        self._path_parts: set[int] = set()   # string literals that are path parts

    # -- names that must not be renamed as bare identifiers ----------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._no_rename.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._no_rename.add(id(node.keyword))

    def visit_Call(self, node: cst.Call) -> None:
        if _is_path_call(_dotted(node.func)):
            self._path_parts.update(id(a.value) for a in node.args if isinstance(a.value, cst.SimpleString))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Divide):  # pathlib: root / "cuda"
            self._path_parts.update(id(v) for v in (node.left, node.right) if isinstance(v, cst.SimpleString))

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
        source = _dotted(original)
        if source is not None and source != name and source in self.t.dotted:
            # A longer rule (torch.cuda.CUDAGraph) over a prefix already rewritten
            # (torch.cuda): the longer one wins, the prefix's rewrite is not counted.
            self._undo_dotted(source)
            name = source
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
    def _text(self, text: str, full: bool, path: bool = False) -> str:
        return _string_text(self.t, text, full, self.counts, path)

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        m = _STR_PREFIX.match(updated.value)
        if not m or "b" in m.group(1).lower():
            return updated
        pre, q = m.group(0), m.group(2)
        inner = updated.value[len(pre):len(updated.value) - len(q)]
        new = self._text(inner, full=True, path=id(original) in self._path_parts)
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


# A code fragment inside a prose comment: a dotted name (maybe after a dot),
# maybe called, e.g. `x.cuda(0)`, `.cuda()`, `torch.cuda.set_device(rank)`.
_FRAGMENT = re.compile(r"\.?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\((?:[^()\n]|\([^()\n]*\))*\))?")


def comment_text(t: Table, text: str, counts: Counter, hit: bool = False) -> str:
    """A comment (``# ...``) rewritten like code, never half-way.

    If the text after ``#`` is Python (``# storage.cuda(torch.cuda.current_device())``),
    it is converted exactly as that code would be. Otherwise each code
    fragment in the prose (a dotted name, maybe called: ``x.cuda(0)``,
    ``torch.cuda.synchronize()``) is converted as code, and environment
    variable names (``CUDA_VISIBLE_DEVICES``) are renamed; plain words such
    as "cuda" or "CUDA" stay. ``hit``: the caller knows that ``text`` has a
    trigger word."""
    if not hit and not t.find_hits(text):
        return text
    body = text[1:]
    code = body.strip()
    if code and not _surely_prose(code):
        try:
            ast.parse(code)
        except (SyntaxError, ValueError):
            pass
        else:
            new = _comment_code(t, code, counts)
            i = body.index(code)
            return "#" + body[:i] + new + body[i + len(code):]

    cache = t.__dict__.setdefault("_comment_fragment_cache", {})

    def sub(m):
        frag = m.group(0)
        hit = cache.get(frag)
        if hit is None:
            hit = _fragment(t, frag)
            if len(cache) >= 4096:
                cache.clear()
            cache[frag] = hit
        for k, v in hit[1]:
            counts[k] += v
        return hit[0]
    return _FRAGMENT.sub(sub, text)


# Two names side by side (`cuda tensor`), neither a keyword: never Python.
_NAME_PAIR = re.compile(r"(?<!\w)([A-Za-z_]\w*)[ \t]+(?=([A-Za-z_]\w*)(?!\w))")
_KEYWORDS = frozenset(keyword.kwlist) | frozenset(getattr(keyword, "softkwlist", ())) | {
    "match", "case", "type", "_"}


def _surely_prose(code: str) -> bool:
    """True only if ``code`` cannot parse as Python: two names side by side,
    neither a (soft) keyword, with no string, comment or backslash around
    that could hide them. Saves an ``ast.parse`` (and its SyntaxError) for
    most prose comments; anything else is left to ``ast.parse``."""
    if not code.isascii() or any(c in code for c in "'\"#\\"):
        return False
    for m in _NAME_PAIR.finditer(code):
        if m.group(1) not in _KEYWORDS and m.group(2) not in _KEYWORDS:
            return True
    return False


def _fragment(t: Table, frag: str) -> tuple[str, tuple]:
    """A code fragment of a prose comment rewritten: (text, count items)."""
    if frag in t.env:
        return t.env[frag], (("py.comment:env:" + frag, 1),)
    if not t.find_hits(frag):
        return frag, ()
    lead = frag.startswith(".")
    counts: Counter = Counter()
    try:
        new = _comment_code(t, "_" + frag if lead else frag, counts)
    except SyntaxError:
        return frag, ()
    return (new[1:] if lead else new), tuple(counts.items())


def _comment_code(t: Table, code: str, counts: Counter) -> str:
    # Comments repeat the same fragments (`cuda`, `x.cuda()`) thousands of
    # times in a big file: each costs a parse, so results are kept per table.
    cache = t.__dict__.setdefault("_comment_code_cache", {})
    hit = cache.get(code)
    if hit is None:
        r = _convert_source(code + "\n", t, False, "<comment>")
        hit = (r.source[:-1], tuple(("py.comment:" + k.removeprefix("py."), v)
                                    for k, v in r.counts.items()))
        if len(cache) >= 4096:
            cache.clear()
        cache[code] = hit
    for k, v in hit[1]:
        counts[k] += v
    return hit[0]


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


# --------------------------------------------------------------------------
# Review (call sites a rewrite cannot fix), on the original ast
# --------------------------------------------------------------------------

_FIELDS: dict[type, tuple[str, ...]] = {}   # an ast node type's fields, without ctx
# The node types _review looks at (any other node is only walked through).
_REVIEWED = (ast.Call, ast.Compare, ast.Attribute, ast.Import, ast.ImportFrom, ast.If,
             ast.IfExp, ast.Constant, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


_REVIEW_KINDS = frozenset({"compare", "attribute", "if-test", "call", "import", "string", "none"})


def _review_needles(t: Table):
    """For _nothing_to_review: a regex that every statement in which a
    review check can fire matches (None when the table has a check kind this
    does not know). A call or attribute check needs all the names of a key,
    or of the name a dotted rule turns into it (``torch.cuda.graph`` for
    ``torch.musa.graph``); one of them, the least common, is in the regex.
    Strings and comparisons need a quote, imports ``import``, if-tests ``if``."""
    cache = t.__dict__.get("_review_needles", 0)
    if cache == 0:
        if not {i.kind for i in t.review} <= _REVIEW_KINDS:
            cache = None
        else:
            keys = {t.apply_dotted(n) for i in t.review if i.kind in ("call", "attribute")
                    for n in i.detect["names"]}
            needs = set()
            for k in keys:
                needs.add(tuple(k.split(".")))
                for src, dst in t.dotted.items():
                    if k == dst or k.startswith(dst + "."):
                        needs.add(tuple((src + k[len(dst):]).split(".")))
            common = {"torch", "cuda", "musa"}
            anchors = {max(n, key=lambda c: (c not in common, len(c))) for n in needs}
            words = sorted(anchors | {"'", '"', "import", "if"}, key=lambda w: (-len(w), w))
            cache = re.compile("|".join(map(re.escape, words)))
        t.__dict__["_review_needles"] = cache
    return cache


def _nothing_to_review(node, lines: list[str], needles) -> bool:
    """True only if no review check can fire in ``node``: its text (ASCII,
    as identifiers are not NFKC-folded then) does not match _review_needles.
    Saves the walk over most rewritten statements."""
    if needles is None or getattr(node, "lineno", None) is None:
        return False
    start, end = _span(node)
    text = lines[start - 1] if start == end else "".join(lines[start - 1:end])
    return text.isascii() and needles.search(text) is None


def _review(t: Table, nodes, lines: list[str], out: list, seen: set) -> None:
    needles = _review_needles(t)
    nodes = [n for n in nodes if not _nothing_to_review(n, lines, needles)]
    if not nodes:
        return
    norm = functools.lru_cache(maxsize=4096)(t.apply_dotted)
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
    reviewed = frozenset(_REVIEWED)
    Call, Attribute, Compare, Constant = ast.Call, ast.Attribute, ast.Compare, ast.Constant
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    t_calls, t_decorators = t.calls, t.decorators
    # A breadth-first walk (as ast.walk, without the Load/Store context
    # nodes), inlined: this loop
    # runs for every node of every rewritten statement.
    AST, fields = ast.AST, _FIELDS
    todo: collections.deque = collections.deque()
    pop, extend, append = todo.popleft, todo.extend, todo.append
    for root in nodes:
        append(root)
        while todo:
            node = pop()
            tp = type(node)
            fs = fields.get(tp)
            if fs is None:
                fs = fields[tp] = tuple(f for f in node._fields if f != "ctx")
            for f in fs:
                v = getattr(node, f, None)
                if type(v) is list:
                    extend(c for c in v if isinstance(c, AST))
                elif isinstance(v, AST):
                    append(v)
            if tp not in reviewed or id(node) in exempt:
                continue
            if tp is Call:
                name = _ast_dotted(node.func)
                if name is not None:
                    if norm(name) in t_calls:
                        exempt.update(id(x) for x in ast.walk(node.func))
                    item = calls.get(norm(name)) or (calls.get(name.rsplit(".", 1)[-1])
                                                     if "." not in name else None)
                    if item:
                        add(node, item)
            elif tp is Attribute:
                name = _ast_dotted(node)
                item = attrs.get(norm(name)) if name else None
                item = item or attrs.get(node.attr)
                if item:
                    add(node, item)
            elif tp in defs:
                for d in node.decorator_list:
                    n = _ast_dotted(d)
                    if n is not None and norm(n) in t_decorators:
                        exempt.update(id(x) for x in ast.walk(d))
            elif tp is Compare:
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
            elif tp is ast.Import or tp is ast.ImportFrom:
                mods = [a.name for a in node.names] if tp is ast.Import else [node.module or ""]
                for m in mods:
                    item = imports.get(m.split(".")[0]) or attrs.get(norm(m))
                    if item:
                        add(node, item)
            elif (tp is ast.If or tp is ast.IfExp) and iftests and (
                    tp is ast.IfExp or node.orelse):
                for sub in ast.walk(node.test):
                    if isinstance(sub, ast.Call):
                        n = _ast_dotted(sub.func)
                        item = iftests.get(norm(n)) if n else None
                        if item:
                            add(node, item)
            elif tp is Constant and strings and isinstance(node.value, str):
                for w, item in strings:
                    if w in node.value:
                        add(node, item)


# --------------------------------------------------------------------------
# Fast path: simple rewrites as text edits at ast positions
# --------------------------------------------------------------------------

# Calls whose string arguments are path parts, and the rules that still apply there: the
# converter renames .cu files but no folder, so os.path.join(src, "cuda") must keep naming
# the folder "cuda" (rewritten to "musa", a setup.py's glob found no kernel source and
# the kernels dropped out of the build without an error).
_PATH_CALLS = frozenset({"join", "joinpath", "Path", "PurePath", "PosixPath", "glob", "iglob",
                         "rglob", "listdir", "scandir", "walk", "exists", "isdir", "isfile",
                         "makedirs", "mkdir", "open", "relpath", "abspath", "realpath"})
_PATH_RULES = frozenset({"string.cu-source"})


def _is_path_call(func_name: str | None) -> bool:
    return bool(func_name) and func_name.rsplit(".", 1)[-1] in _PATH_CALLS


def _string_text(t: Table, text: str, full: bool, counts: Counter, path: bool = False) -> str:
    """The string rules on a literal's text (whole-literal rules when ``full``; only the
    file-name rules when the literal is a path part, ``path``)."""
    if full:
        for rid, pat, to in t.string_rules:
            if path and rid not in _PATH_RULES:
                continue
            m = pat.fullmatch(text)
            if m:
                counts["py." + rid] += 1
                return m.expand(to)
    if t.string_token_re is not None:
        def sub(m):
            counts["py.string-token:" + m.group(0)] += 1
            return t.string_tokens[m.group(0)]
        text = t.string_token_re.sub(sub, text)
    return text


class _NotFast(Exception):
    """This piece needs libcst (a rule or a shape the fast path does not do)."""


_DESCEND_HITS = 8   # up to this many hits, a descent per hit; more, one walk


def _fast_edits(t: Table, node, hits, lines: list[str], counts: Counter) -> list[tuple]:
    """Edits ``((line, col), (line, col), text)`` that give exactly what the
    libcst rewriter gives for ``node``, when every hit is the attribute name
    of a plain dotted chain (dotted/method/attribute rules), inside a
    one-token string literal, or a bare name. Anything else (comments,
    f-strings, call rules, imports, keywords...) raises _NotFast.

    libcst costs ~1 ms a statement; this costs ~10 us, which is what makes a
    file with a rewrite on every line linear *and* fast. A piece with many
    hits (a literal too long to split) takes one walk over all its nodes."""
    if len(hits) > _DESCEND_HITS:
        return _fast_edits_walk(t, node, hits, lines, counts)
    roots = node if isinstance(node, list) else [node]
    edits: list[tuple] = []
    done: set[int] = set()
    Attribute, Name, JoinedStr, Constant = ast.Attribute, ast.Name, ast.JoinedStr, ast.Constant
    for ln, a, b in hits:
        # Only the nodes that hold the hit are looked at (not the whole
        # statement): the chain from the root down to the deepest one.
        path: list = []
        if not _descend(roots, (ln, a), (ln, b), path):
            raise _NotFast("hit outside the piece's nodes")
        at = path[-1]
        tp = type(at)
        if tp is Attribute and (at.end_lineno, at.end_col_offset) == (ln, b) \
                and b - len(at.attr) == a:
            i = len(path) - 1
            while i > 0 and type(path[i - 1]) is Attribute:
                i -= 1
            top = path[i]
            if id(top) not in done:
                done.add(id(top))
                _fast_chain(t, top, path[i - 1] if i else None, lines, edits, counts)
            continue
        if any(type(n) is JoinedStr for n in path):
            raise _NotFast("f-string")
        if tp is Constant and isinstance(at.value, (str, bytes)):
            parent = path[-2] if len(path) > 1 else None
            if type(parent) is ast.FormattedValue:
                raise _NotFast("f-string")
            if id(at) not in done and isinstance(at.value, str):
                done.add(id(at))
                _fast_string(t, at, lines, edits, counts, _is_path_part(at, parent))
            continue
        if tp is Name and (at.lineno, at.col_offset, at.end_col_offset) == (ln, a, b):
            continue
        raise _NotFast("hit outside a name, attribute or string")
    edits.sort(key=lambda e: (e[0], e[1]))
    for e1, e2 in zip(edits, edits[1:]):
        if e2[0] < e1[1]:
            raise _NotFast("overlapping rewrites")
    return edits


def _fast_edits_walk(t: Table, node, hits, lines: list[str], counts: Counter) -> list[tuple]:
    """_fast_edits for a piece with many hits (a big literal): one walk over
    all its nodes instead of a descent per hit."""
    attrs: dict[tuple, ast.Attribute] = {}
    parents: dict[int, ast.AST] = {}
    strings: dict[int, list] = {}      # by first line; multi-line ones under 0
    names: set[tuple] = set()
    stack = list(node) if isinstance(node, list) else [node]
    AST, fields, push = ast.AST, _FIELDS, stack.append
    Attribute, Name, JoinedStr, Constant = ast.Attribute, ast.Name, ast.JoinedStr, ast.Constant
    while stack:
        n = stack.pop()
        tp = type(n)
        fs = fields.get(tp)
        if fs is None:
            fs = fields[tp] = tuple(f for f in n._fields if f != "ctx")
        for f in fs:
            v = getattr(n, f, None)
            if type(v) is list:
                for c in v:
                    if isinstance(c, AST):
                        parents[id(c)] = n
                        push(c)
            elif isinstance(v, AST):
                parents[id(v)] = n
                push(v)
        if tp is Attribute:
            attrs[(n.end_lineno, n.end_col_offset)] = n
        elif tp is Name:
            names.add((n.lineno, n.col_offset, n.end_col_offset))
        elif tp is JoinedStr or tp is Constant and isinstance(n.value, (str, bytes)):
            strings.setdefault(n.lineno if n.lineno == n.end_lineno else 0, []).append(n)
    edits: list[tuple] = []
    done: set[int] = set()
    for ln, a, b in hits:
        at = attrs.get((ln, b))
        if at is not None and b - len(at.attr) == a:
            top = at
            while isinstance(parents.get(id(top)), ast.Attribute):
                top = parents[id(top)]
            if id(top) not in done:
                done.add(id(top))
                _fast_chain(t, top, parents.get(id(top)), lines, edits, counts)
            continue
        s = next((s for s in (*strings.get(ln, ()), *strings.get(0, ()))
                  if (s.lineno, s.col_offset) <= (ln, a)
                  and (s.end_lineno, s.end_col_offset) >= (ln, b)), None)
        if s is not None:
            if isinstance(s, ast.JoinedStr) or id(s) in parents and isinstance(
                    parents[id(s)], (ast.JoinedStr, ast.FormattedValue)):
                raise _NotFast("f-string")
            if id(s) not in done and isinstance(s.value, str):
                done.add(id(s))
                _fast_string(t, s, lines, edits, counts, _is_path_part(s, parents.get(id(s))))
            continue
        if (ln, a, b) in names:
            continue
        raise _NotFast("hit outside a name, attribute or string")
    edits.sort(key=lambda e: (e[0], e[1]))
    for e1, e2 in zip(edits, edits[1:]):
        if e2[0] < e1[1]:
            raise _NotFast("overlapping rewrites")
    return edits


def _descend(nodes, lo: tuple, hi: tuple, path: list) -> bool:
    """Append to ``path`` the first of ``nodes`` whose span holds ``lo..hi``
    ((line, column) pairs) and, below it, the child that holds it, down to
    the deepest; True if one was found. Nodes without a position
    (arguments, comprehension, withitem, operators) are looked through."""
    (l0, c0), (l1, c1) = lo, hi
    AST, fields, positioned = ast.AST, _FIELDS, _POSITIONED
    found = False
    while True:
        nxt = None
        for n in nodes:
            tp = type(n)
            if tp is list:
                if _descend(n, lo, hi, path):
                    return True
                continue
            pos = positioned.get(tp)
            if pos is None:
                if not isinstance(n, AST):
                    continue
                pos = positioned[tp] = "lineno" in tp._attributes
            if not pos:
                path.append(n)
                if _descend(_child_fields(n, fields), lo, hi, path):
                    return True
                path.pop()
                continue
            ln = n.lineno
            if ln is None or (ln > l0 or ln == l0 and n.col_offset > c0):
                continue
            ln = n.end_lineno
            if ln < l1 or ln == l1 and n.end_col_offset < c1:
                continue
            nxt = n
            break
        if nxt is None:
            return found
        path.append(nxt)
        found = True
        nodes = _child_fields(nxt, fields)


_POSITIONED: dict[type, bool] = {}   # whether an ast node type has a position


def _child_fields(n, fields):
    """The values of ``n``'s fields (without ctx): nodes, lists of nodes, others."""
    tp = type(n)
    fs = fields.get(tp)
    if fs is None:
        fs = fields[tp] = tuple(f for f in n._fields if f != "ctx")
    return [getattr(n, f, None) for f in fs]


def _segment(lines, n) -> str:
    if n.lineno == n.end_lineno:
        return lines[n.lineno - 1][n.col_offset:n.end_col_offset]
    return (lines[n.lineno - 1][n.col_offset:] + "".join(lines[n.lineno:n.end_lineno - 1])
            + lines[n.end_lineno - 1][:n.end_col_offset])


def _fast_chain(t: Table, top: ast.Attribute, parent, lines, edits, counts) -> None:
    chain = []
    n = top
    while isinstance(n, ast.Attribute):
        chain.append(n)
        n = n.value
    chain.reverse()
    name = source = n.id if isinstance(n, ast.Name) else None
    mine = len(edits)
    for n in chain:
        full = f"{name}.{n.attr}" if name is not None else None
        source = f"{source}.{n.attr}" if source is not None else None
        if source is not None and source != full and source in t.dotted:
            raise _NotFast("a longer rule over a rewritten prefix")
        if full is not None and full in t.dotted:
            if _segment(lines, n) != full:
                raise _NotFast("dotted name with spaces or brackets")
            if len(edits) > mine:   # an inner attribute rule already fired
                raise _NotFast("nested rewrites")
            name = t.dotted[full]
            counts["py.dotted:" + full] += 1
            edits.append(((n.lineno, n.col_offset), (n.end_lineno, n.end_col_offset), name))
            continue
        if n.attr in t.attributes and not (full or "").startswith("torch."):
            if n.attr in t.methods:
                raise _NotFast("attribute and method rule")
            new = t.attributes[n.attr]
            counts["py.attribute:" + n.attr] += 1
            end = (n.end_lineno, n.end_col_offset)
            edits.append(((end[0], end[1] - len(n.attr)), end, new))
            name = f"{name}.{new}" if name is not None else None
            continue
        name = full
    if isinstance(parent, ast.Call) and parent.func is top:
        if name is not None and name in t.calls:
            raise _NotFast("call rule")
        if top.attr in t.methods and not (name or "").startswith("torch."):
            counts["py.method:" + top.attr] += 1
            end = (top.end_lineno, top.end_col_offset)
            edits.append(((end[0], end[1] - len(top.attr)), end, t.methods[top.attr]))
    elif isinstance(parent, ast.Call) and name is not None and name in t.calls:
        raise _NotFast("call rule")


def _is_path_part(s, parent) -> bool:
    """Whether string literal ``s`` is a path part: an argument of a path call, or an
    operand of ``/`` (pathlib)."""
    if isinstance(parent, ast.Call):
        return s in parent.args and _is_path_call(_ast_dotted(parent.func))
    return isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div)


def _fast_string(t: Table, s, lines, edits, counts, path: bool = False) -> None:
    seg = _segment(lines, s)
    m = _STR_PREFIX.match(seg)
    if not m:
        raise _NotFast("string shape")
    pre, q = m.group(0), m.group(2)
    inner = seg[len(pre):len(seg) - len(q)]
    if not seg.endswith(q) or len(seg) < len(pre) + len(q) or q in inner.replace(
            "\\\\", "").replace("\\" + q[0], ""):
        raise _NotFast("concatenated string")
    new = _string_text(t, inner, True, counts, path)
    if new != inner:
        edits.append(((s.lineno, s.col_offset + len(pre)),
                      (s.end_lineno, s.end_col_offset - len(q)), new))


def _header_exprs(node) -> list | None:
    """The expressions of a compound statement's header, for the fast path
    (None for headers with decorators, arguments or other parts)."""
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.target, node.iter]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [x for i in node.items for x in (i.context_expr, i.optional_vars) if x is not None]
    return None


def _fast_piece(t: Table, node, hits, lines: list[str], begin: tuple, stop: tuple,
                counts: Counter) -> str | None:
    """The rewritten text from ``begin`` to ``stop`` ((line, column) pairs),
    or None when libcst must do it. ASCII lines only (ast columns are UTF-8
    bytes)."""
    start, end = begin[0], stop[0]
    if isinstance(node, _COMPOUND) or not all(lines[i].isascii() for i in range(start - 1, end)):
        return None
    local: Counter = Counter()
    # A comment after a simple statement on its last line (`x = y.cuda()  # cuda`):
    # rewritten as libcst's leave_Comment does, with comment_text.
    comment = None
    if isinstance(node, ast.stmt) and node.end_lineno == end and stop[1] == len(lines[end - 1]):
        rest = lines[end - 1][node.end_col_offset:]
        col = node.end_col_offset + len(rest) - len(rest.lstrip(" \t"))
        body = rest.lstrip(" \t").removesuffix("\n")
        if body.startswith("#") and "\r" not in body and "\f" not in body:
            comment = (col, body)
            code_hits = [h for h in hits if h[0] != end or h[1] < col]
            comment_hit = len(code_hits) != len(hits)
            hits = code_hits
    try:
        edits = _fast_edits(t, node, hits, lines, local)
    except _NotFast:
        return None
    if comment is not None and comment_hit:
        col, body = comment
        new = comment_text(t, body, local, hit=True)
        if new != body:
            edits.append(((end, col), (end, col + len(body)), new))
    counts.update(local)
    out = []
    pos = begin
    for a, b, text in edits:
        out.append(_slice(lines, pos, a))
        out.append(text)
        pos = b
    out.append(_slice(lines, pos, stop))
    return "".join(out)


def _slice(lines, a, b) -> str:
    (l0, c0), (l1, c1) = a, b
    if l0 == l1:
        return lines[l0 - 1][c0:c1]
    return lines[l0 - 1][c0:] + "".join(lines[l0:l1 - 1]) + lines[l1 - 1][:c1]


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


_BATCH = 256   # pieces per libcst parse: amortises its fixed cost, bounds its memory
_FAST = True   # text edits for simple pieces (tests compare with libcst by turning it off)


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
    name_map: dict[str, str] = {}
    if any(m in norm for m in t.imports):     # from-imports rename names file-wide
        for _, _, tree in _blocks(norm, filename):
            name_map.update(_name_map(t, tree, norm))
    counts: Counter = Counter()
    review: list = []
    outs = []
    has_launch, at = False, -1
    # Hits never span lines and blocks are whole lines, so one pass over the
    # text gives each block's hits (offsets shifted), as a pass per block would.
    all_hits = (found if eols is None else t.find_hits(norm)) if found else []
    hit_starts = [a for a, _ in all_hits]
    off = 0
    for first, text, tree in _blocks(norm, filename):   # one block's ast alive at a time
        lo = bisect.bisect_left(hit_starts, off)
        hi = bisect.bisect_left(hit_starts, off + len(text))
        hits = [(a - off, b - off) for a, b in all_hits[lo:hi]]
        off += len(text)
        outs.append(_convert_block(text, tree, hits, t, name_map, counts, review, first - 1)
                    if hits else text)
        if launch:
            has_launch = has_launch or _has_launch_import(tree)
            if at < 0 and tree.body:
                at = _launch_line(tree)
                at = at + first - 1 if at >= 0 else at
        del tree
    joined = "".join(outs)
    if ".cu" in joined:
        _leftover_cu(joined, review)
    out = restore_eols(joined, eols)
    if launch and not has_launch:
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


_CU = re.compile(r"\.(?:cuh?(?![\w])|\{[^{}\n]*\bcuh?\b[^{}\n]*\})")


def _leftover_cu(text: str, review: list) -> None:
    """Strings that still name .cu/.cuh files after the rewrite (an f-string,
    ``"*.{cu,cpp}"``, a concatenation): the sources are renamed, so such a
    pattern would drop them from the build without an error. Listed for
    review (id cu-source-pattern); only where a quote precedes on the line."""
    seen = set()
    for m in _CU.finditer(text):
        ls = text.rfind("\n", 0, m.start()) + 1
        before = text[ls:m.start()]
        if "#" in before.split('"')[0].split("'")[0] or not ("'" in before or '"' in before):
            continue
        line = text.count("\n", 0, ls) + 1
        if line not in seen:
            seen.add(line)
            le = text.find("\n", m.end())
            review.append({"line": line, "id": "cu-source-pattern",
                           "text": text[ls:le if le >= 0 else len(text)].strip()[:160]})


_SPLIT = 4000   # lines: files over twice this are parsed in top-level blocks
_CONTINUES = re.compile(r"(?:else|elif|except|finally)(?![\w])")


def _blocks(norm: str, filename: str):
    """``norm`` as (first line, text, ast) blocks of whole top-level statements
    (a generator: one block's ast at a time).

    One ``ast.parse`` of an 80,000-line file takes ~550 MB; blocks of a few
    thousand lines keep memory flat. A block ends before a line that starts
    in column 0 with a name (not else/elif/except/finally) and only if the
    text before it parses: a cut inside a string, a bracket or after a
    backslash leaves that text unfinished, which does not parse, so a block
    that parses is a run of complete statements. Rules are local to a
    statement, so converting blocks one by one gives the same text."""
    if norm.count("\n") <= 2 * _SPLIT:
        yield 1, norm, ast.parse(norm, filename=filename)
        return
    lines = io.StringIO(norm, newline="").readlines()
    start, step = 0, _SPLIT
    i = start + step
    while i < len(lines):
        c = lines[i][:1]
        if (c.isalpha() or c in "_@") and c.isidentifier() or c == "@":
            if not _CONTINUES.match(lines[i]):
                text = "".join(lines[start:i])
                try:
                    tree = ast.parse(text, filename=filename)
                except SyntaxError:
                    step *= 2            # a long string or bracket: try further on
                    i += step
                    continue
                yield start + 1, text, tree
                del tree
                start, step = i, _SPLIT
                i = start + step
                continue
        i += 1
    text = "".join(lines[start:])
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError as e:
        if e.lineno is not None:
            e.lineno += start
            if getattr(e, "end_lineno", None) is not None:
                e.end_lineno += start
        raise
    yield start + 1, text, tree


def _convert_block(norm: str, tree: ast.Module, found, t: Table, name_map: dict[str, str],
                   counts: Counter, review_out: list, offset: int) -> str:
    """The rewritten text of one block (review lines shifted by ``offset``)."""
    lines = io.StringIO(norm, newline="").readlines()   # lines as Python counts them
    line_starts = [0, *itertools.accumulate(map(len, lines))]
    per_line: dict[int, list[tuple[int, int]]] = {}
    for a, b in found:
        ln = bisect.bisect_right(line_starts, a)
        base = line_starts[ln - 1]
        per_line.setdefault(ln, []).append((a - base, b - base))
    cand = sorted(per_line)

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
        slow = []          # indexes into kept that need libcst
        news: list = []
        fast = _FAST and not name_map
        for start, end, hdr in kept:
            expr = hdr is not None and hdr[0] == "expr"
            if expr:
                _, scol, ecol, node = hdr
                first, last = lines[start - 1], lines[end - 1]
                code = first[scol:ecol] if start == end else \
                    first[scol:] + "".join(lines[start:end - 1]) + last[:ecol]
                review_nodes.append(node)
            else:
                code = "".join(lines[start - 1:end])
                node = None
                if hdr is not None:
                    review_nodes.append(_header_only(hdr[2]))
                else:
                    for _, _, n in loc.path(start):
                        if _span(n) == (start, end):
                            node = n
                            review_nodes.append(n)
                            break
            new = None
            if fast and hdr is not None and not expr:   # just the header's expressions
                node = _header_exprs(hdr[2])
            if fast and node is not None:
                hits = [(ln, a, b) for ln in range(start, end + 1) for a, b in per_line.get(ln, ())]
                begin = (start, scol) if expr else (start, 0)
                stop = (end, ecol) if expr else (end, len(lines[end - 1]))
                new = _fast_piece(t, node, hits, lines, begin, stop, counts)
            if new is None:
                slow.append(len(news))
                pieces.append((code, hdr))
            news.append(new)
        for i, new in zip(slow, _transform_batch(pieces, t, name_map, counts)):
            news[i] = new
        for (start, end, hdr), new in zip(kept, news):
            if hdr is not None and hdr[0] == "expr":
                scol, ecol = hdr[1], hdr[2]
                new = lines[start - 1][:scol] + new + lines[end - 1][ecol:]
            else:
                if new == "".join(lines[start - 1:end]):
                    continue
            new_lines[start - 1:end] = [new] + [""] * (end - start)
        _review(t, review_nodes, lines, review, seen)
        # A comment line inside a rewritten chunk was rewritten with it:
        # bisect over the chunks (sorted by start; reach = running max end).
        starts = [c[0] for c in kept]
        reach = list(itertools.accumulate((c[1] for c in kept), max))
        for ln in comment_lines:
            i = bisect.bisect_right(starts, ln) - 1
            if i >= 0 and reach[i] >= ln:
                continue
            text = lines[ln - 1]
            i = text.index("#")
            new_lines[ln - 1] = text[:i] + comment_text(t, text[i:], counts)

    for x in review:
        x["line"] += offset
    review_out.extend(review)
    return "".join(new_lines)

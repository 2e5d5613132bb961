"""Review: call sites a rewrite cannot fix, found on the original ast."""
from __future__ import annotations

import ast
import collections
import functools
import re

from torch_musa.cuda_mapping import Table
from torch_musa.utils.musa_converter.python_rewriter.locator import _FIELDS, _ast_dotted, _span


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

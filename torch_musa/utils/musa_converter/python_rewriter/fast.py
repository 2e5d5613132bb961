"""The fast path: simple rewrites as text edits at ast positions, for pieces
whose rules and shapes need no libcst (anything else raises _NotFast and goes
through libcst)."""
from __future__ import annotations

import ast
from collections import Counter

from torch_musa.cuda_mapping import Table
from torch_musa.utils.musa_converter.python_rewriter.comments import comment_text
from torch_musa.utils.musa_converter.python_rewriter.locator import _COMPOUND, _FIELDS, _ast_dotted
from torch_musa.utils.musa_converter.python_rewriter.rewriter import _STR_PREFIX, _is_path_call, _string_text


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

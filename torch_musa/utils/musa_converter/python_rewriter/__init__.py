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

The pieces, one module each: ``rewriter`` (the libcst rewriter), ``comments``
(comments), ``locator`` (the units to rewrite), ``fast`` (text edits for simple
pieces), ``batch`` (libcst passes over many pieces), ``review`` (what a rewrite
cannot fix) and ``blocks`` (big files in blocks); this module converts a file.
"""
from __future__ import annotations

import ast
import bisect
import gc
import io
import itertools
import re
from collections import Counter
from dataclasses import dataclass, field

from torch_musa.cuda_mapping import Table, load_table
from torch_musa.utils.musa_converter.text import restore_eols, split_eols
from torch_musa.utils.musa_converter.python_rewriter import comments
from torch_musa.utils.musa_converter.python_rewriter.batch import _transform, _transform_batch
from torch_musa.utils.musa_converter.python_rewriter.blocks import _blocks
from torch_musa.utils.musa_converter.python_rewriter.comments import comment_text
from torch_musa.utils.musa_converter.python_rewriter.fast import _fast_piece, _header_exprs
from torch_musa.utils.musa_converter.python_rewriter.locator import _Locator, _span
from torch_musa.utils.musa_converter.python_rewriter.review import _review

LAUNCH_IMPORT = "import torch_musa"


@dataclass
class PyResult:
    source: str
    counts: Counter = field(default_factory=Counter)
    review: list = field(default_factory=list)   # dicts: line, id, text

    @property
    def changed(self) -> bool:
        return bool(self.counts)


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


_FAST = True   # text edits for simple pieces (tests compare with libcst by turning it off)


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


comments.use_code_converter(_convert_source)


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

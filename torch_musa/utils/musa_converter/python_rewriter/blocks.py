"""Big files parsed in blocks of whole top-level statements, so that memory
stays flat."""
from __future__ import annotations

import ast
import io
import re


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

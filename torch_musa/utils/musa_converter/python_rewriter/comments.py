"""Comments rewritten like code, never half-way: a comment that is Python is
converted as that code would be; otherwise the code fragments in its prose
are, and environment variable names are renamed."""
from __future__ import annotations

import ast
import keyword
import re
from collections import Counter

from torch_musa.cuda_mapping import Table

# Code in a comment converts exactly as that code would in a file: through the
# whole conversion (the package's _convert_source), which registers itself here
# when it loads, since it depends on this module.
_convert_code = None


def use_code_converter(convert) -> None:
    """``convert(source, table, launch, filename) -> PyResult``, for code in comments."""
    global _convert_code
    _convert_code = convert


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
        r = _convert_code(code + "\n", t, False, "<comment>")
        hit = (r.source[:-1], tuple(("py.comment:" + k.removeprefix("py."), v)
                                    for k, v in r.counts.items()))
        if len(cache) >= 4096:
            cache.clear()
        cache[code] = hit
    for k, v in hit[1]:
        counts[k] += v
    return hit[0]

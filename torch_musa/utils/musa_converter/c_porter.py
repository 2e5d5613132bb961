"""CUDA -> MUSA porting of C/C++ sources (.cu, .cuh, .cpp, .h, ...).

One regex pass over the text: ``#include`` lines are mapped through the
table's header list (local ``"x.cuh"`` includes become ``"x.muh"``), every
other identifier (with its ``::`` qualifiers) through the symbol list, then
the prefix families (``cudaXxx`` -> ``musaXxx``). Identifiers are matched
whole, so ``barracuda`` or ``my_cudaMalloc_wrapper`` never change. Symbols
mapped only by their prefix are listed in the report as unverified.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field

from torch_musa.cuda_mapping import Table, load_table
from torch_musa.utils.musa_converter.text import restore_eols, split_eols

_TOKEN = re.compile(
    r'(?P<inc>^[ \t]*#[ \t]*include[ \t]*)(?P<q>[<"])(?P<path>[^>"\n]+)[>"]'
    r"|(?P<id>(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)",
    re.M,
)


_IMPL_KEY = re.compile(r"(\bTORCH_LIBRARY_IMPL\s*\(\s*\w+\s*,\s*)(CUDA|AutogradCUDA)(\s*,)")


@dataclass
class CResult:
    source: str
    counts: Counter = field(default_factory=Counter)
    review: list = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.counts)


def new_path(path: str, table: Table | None = None) -> str:
    t = table or load_table()
    root, ext = os.path.splitext(path)
    return root + t.c_extensions.get(ext, ext)


def port_source(text: str, table: Table | None = None) -> CResult:
    t = table or load_table()
    original = text
    text, eols = split_eols(text)   # `^` must match after a bare \r too
    counts: Counter = Counter()
    review: list = []
    unverified: set[str] = set()
    prefixes = t.c_prefixes

    def one(name: str) -> str:
        hit = t.c_symbols.get(name)
        if hit is not None:
            if hit[0] != name:
                counts[hit[1] + ":" + name] += 1
            return hit[0]
        m = t.c_prefix_re.fullmatch(name)
        if m:
            frm, to, rid = prefixes[m.lastindex - 1]
            counts[rid + ":" + name] += 1
            if name not in unverified:
                unverified.add(name)
                review.append({"line": _line_of(text, name), "id": "c-unverified-symbol",
                               "text": f"{name} -> {to + name[len(frm):]} (mapped by prefix)"})
            return to + name[len(frm):]
        return name

    def sub(m: re.Match) -> str:
        if m.group("inc") is not None:
            path, q = m.group("path"), m.group("q")
            new = t.c_headers.get(path)
            if new is None and q == '"':
                base, ext = os.path.splitext(path)
                if ext in t.c_extensions:
                    new = base + t.c_extensions[ext]
            if new is None or new == path:
                return m.group(0)
            counts["c.header:" + path] += 1
            close = ">" if q == "<" else '"'
            return f"{m.group('inc')}{q}{new}{close}"
        token = m.group("id")
        if "::" not in token:
            return one(token)
        parts = token.split("::")
        out: list[str] = []
        i = 0
        while i < len(parts):
            if i + 1 < len(parts):
                pair = parts[i] + "::" + parts[i + 1]
                hit = t.c_symbols.get(pair)
                if hit is not None:
                    counts[hit[1] + ":" + pair] += 1
                    out.extend(hit[0].split("::"))
                    i += 2
                    continue
            out.append(one(parts[i]))
            i += 1
        return "::".join(out)

    def key(m: re.Match) -> str:
        counts["c.dispatch-key:" + m.group(2)] += 1
        return m.group(1) + m.group(2).replace("CUDA", "PrivateUse1") + m.group(3)

    # An operator's CUDA kernels registered for the musa device (a bare CUDA there is a
    # dispatch key; anywhere else it is left alone).
    text = _IMPL_KEY.sub(key, text)
    new = _TOKEN.sub(sub, text)
    return CResult(restore_eols(new, eols) if counts else original, counts, review)


_BUILD_CUDA = re.compile(r"\.cuh?(?![A-Za-z0-9_])|\bCUDA\b|\bnvcc\b|\bcuda_add_\w+|"
                         r"\bCUDA::|\bfind_package\s*\(\s*CUDA", re.I)


def review_build_script(text: str) -> list[dict]:
    """Lines of a CMake/Make script that name CUDA sources or the CUDA
    toolchain: the converter renames .cu files but does not rewrite build
    scripts, so each such line is listed for a human (id build-script-cuda)."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if _BUILD_CUDA.search(code):
            out.append({"line": i, "id": "build-script-cuda", "text": line.strip()[:160]})
    return out


def _line_of(text: str, name: str) -> int:
    m = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text)
    return text.count("\n", 0, m.start()) + 1 if m else 0

"""Jupyter notebooks (``.ipynb``): the code cells go through the Python
rewriter; markdown, outputs and metadata stay as they are.

IPython lines (``%magic``, ``!shell``) are kept aside while a cell is
converted and put back unchanged; a cell that is still not Python (a
``%%cell`` magic, ``x = !ls``) is left alone and named in the note. The JSON is
written back in the layout it was read in (indent, key order, ASCII escapes,
final newline) when that layout is recognised, else in nbformat's own
(indent 1, sorted keys).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from torch_musa.cuda_mapping import Table, load_table
from torch_musa.utils.musa_converter import python_rewriter


@dataclass
class NotebookResult:
    source: str
    counts: Counter = field(default_factory=Counter)
    review: list = field(default_factory=list)
    note: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.counts)


def _mask(code: str) -> tuple[str, dict[int, str]] | None:
    """``code`` with IPython lines replaced by ``pass`` (same indent), and
    those lines; None for a cell magic."""
    if code.lstrip().startswith("%%"):
        return None
    lines = code.split("\n")
    kept = {}
    for i, ln in enumerate(lines):
        s = ln.lstrip()
        if s.startswith(("%", "!")):
            kept[i] = ln
            lines[i] = ln[: len(ln) - len(s)] + "pass"
    return "\n".join(lines), kept


def _unmask(code: str, kept: dict[int, str]) -> str:
    lines = code.split("\n")
    for i, ln in kept.items():
        lines[i] = ln
    return "\n".join(lines)


def _layout(text: str, nb) -> dict | None:
    """json.dumps arguments that reproduce ``text`` exactly, if any."""
    second = text.split("\n", 2)[1] if text.count("\n") >= 2 else ""
    indent = len(second) - len(second.lstrip(" ")) or None
    tail = text[len(text.rstrip("\n")):]
    for sort_keys in (True, False):
        for ensure_ascii in (False, True):
            kw = {"indent": indent, "sort_keys": sort_keys, "ensure_ascii": ensure_ascii}
            if json.dumps(nb, **kw) + tail == text:
                return {**kw, "tail": tail}
    return None


def convert_notebook(text: str, table: Table | None = None) -> NotebookResult:
    """Rewrite the code cells of a notebook's JSON text."""
    t = table or load_table()
    nb = json.loads(text)
    meta = nb.get("metadata") or {}
    lang = ((meta.get("kernelspec") or {}).get("language")
            or (meta.get("language_info") or {}).get("name") or "python")
    if lang.lower() != "python":
        return NotebookResult(text, note=f"kernel language {lang!r}: left unchanged")
    counts: Counter = Counter()
    review: list = []
    skipped = []
    new_cells = []
    for i, cell in enumerate(nb.get("cells") or []):
        src = cell.get("source", "")
        code = "".join(src) if isinstance(src, list) else src
        if cell.get("cell_type") != "code" or not t.find_hits(code):
            new_cells.append(cell)
            continue
        masked = _mask(code)
        try:
            if masked is None:
                raise SyntaxError("cell magic")
            r = python_rewriter.convert_source(masked[0], t, filename=f"<cell {i + 1}>")
        except SyntaxError:
            skipped.append(i + 1)
            new_cells.append(cell)
            continue
        counts.update(r.counts)
        review += [{**x, "text": f"cell {i + 1}: {x['text']}"} for x in r.review]
        if not r.changed:
            new_cells.append(cell)
            continue
        new = _unmask(r.source, masked[1])
        if isinstance(src, list):
            parts = new.split("\n")
            new = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        new_cells.append({**cell, "source": new})
    note = f"cells {', '.join(map(str, skipped))} are not Python (IPython syntax): left as they are" \
        if skipped else ""
    if not counts:
        return NotebookResult(text, counts, review, note)
    layout = _layout(text, nb)
    nb["cells"] = new_cells
    if layout is None:
        out = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        note = "; ".join(x for x in (note, "JSON layout normalised to nbformat's") if x)
    else:
        tail = layout.pop("tail")
        out = json.dumps(nb, **layout) + tail
    return NotebookResult(out, counts, review, note)

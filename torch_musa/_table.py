"""Text tables: the one renderer behind every table torch_musa prints or writes.

Standard library only, and the bottom layer: the configuration (which may import
only torch and the standard library) and ``musa-converter`` (which runs without
torch) use it as much as the tools above them.
"""
from __future__ import annotations

import textwrap
from typing import Any, Iterable, Sequence


def render(headers: Sequence[Any], rows: Iterable[Sequence[Any]], align: str | Sequence[str] = "<",
           markdown: bool = False, wrap: Sequence[int | None] | None = None) -> str:
    """``headers`` and ``rows`` as a table; cells are ``str()``-ed.

    Plain text (the default): columns padded to their widest cell and two spaces
    apart, a rule of dashes under the header, no trailing blanks. ``align`` is
    ``"<"`` (left) or ``">"`` (right), one for every column or one per column.
    ``wrap``: a width per column (``None``: no limit); a longer cell goes on over
    the following lines, the row's other cells blank there, so prose stays readable.
    ``markdown``: a GitHub table (``| a | b |`` under ``|---|---|``), with ``|``
    escaped inside cells; ``align`` and ``wrap`` do not apply.
    """
    head = [str(h) for h in headers]
    body = [[str(c) for c in r] for r in rows]
    if wrap is not None and not markdown:
        body = [line for r in body for line in _wrapped(r, wrap)]
    if markdown:
        def line(cells):
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
        return "\n".join([line(head), "|" + "---|" * len(head), *map(line, body)])
    aligns = [align] * len(head) if isinstance(align, str) else list(align)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(cells):
        return "  ".join(f"{c:{a}{w}}" for c, w, a in zip(cells, widths, aligns)).rstrip()
    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, body)])


def _wrapped(row: list[str], widths: Sequence[int | None]) -> list[list[str]]:
    """One row as the lines its wrapped cells take."""
    if len(widths) != len(row):
        raise ValueError(f"wrap has {len(widths)} widths for a row of {len(row)} cells")
    cells = [textwrap.wrap(c, w) or [""] if w is not None else [c] for c, w in zip(row, widths)]
    return [[c[i] if i < len(c) else "" for c in cells] for i in range(max(map(len, cells)))]

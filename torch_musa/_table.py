"""Text tables: the one renderer behind every table torch_musa prints or writes.

Standard library only, and the bottom layer: the configuration (which may import
only torch and the standard library) and ``musa-converter`` (which runs without
torch) use it as much as the tools above them.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence


def render(headers: Sequence[Any], rows: Iterable[Sequence[Any]], align: str | Sequence[str] = "<",
           markdown: bool = False) -> str:
    """``headers`` and ``rows`` as a table; cells are ``str()``-ed.

    Plain text (the default): columns padded to their widest cell and two spaces
    apart, a rule of dashes under the header, no trailing blanks. ``align`` is
    ``"<"`` (left) or ``">"`` (right), one for every column or one per column.
    ``markdown``: a GitHub table (``| a | b |`` under ``|---|---|``), with ``|``
    escaped inside cells; ``align`` does not apply.
    """
    head = [str(h) for h in headers]
    body = [[str(c) for c in r] for r in rows]
    if markdown:
        def line(cells):
            return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
        return "\n".join([line(head), "|" + "---|" * len(head), *map(line, body)])
    aligns = [align] * len(head) if isinstance(align, str) else list(align)
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(cells):
        return "  ".join(f"{c:{a}{w}}" for c, w, a in zip(cells, widths, aligns)).rstrip()
    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, body)])

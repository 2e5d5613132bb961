"""The text and Markdown renderings of a report (HTML: html_page.py; JSON: the dict)."""
from __future__ import annotations

from torch_musa import _table
from torch_musa.utils.doctor.sections import sections


def text(report: dict) -> str:
    parts = []
    for s in sections(report):
        parts.append(f"== {s.title} ==")
        parts += s.notes
        if s.rows:
            parts.append(_table.render(s.headers, s.rows))
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def markdown(report: dict) -> str:
    parts = ["# musa-doctor report", ""]
    for s in sections(report):
        parts += [f"## {s.title}", ""]
        parts += [f"- {n}" for n in s.notes]
        if s.rows:
            parts += ["", _table.render(s.headers, s.rows, markdown=True)]
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"

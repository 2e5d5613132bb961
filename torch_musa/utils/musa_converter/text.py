"""Line endings kept byte for byte around a rewrite.

The rewriters work on text with ``\\n`` line ends only (libcst drops a bare
``\\r``, and ``^`` in a regex does not match after one). ``split_eols``
records each line's own terminator (``\\n``, ``\\r\\n``, ``\\r`` or none on an
unterminated last line, as Python's tokenizer splits lines), and
``restore_eols`` puts them back. A rewrite never adds or removes a line; if one
did, ``restore_eols`` raises instead of guessing.
"""
from __future__ import annotations

import io


def split_eols(text: str) -> tuple[str, list[str] | None]:
    """(text with every line ending ``\\n``, original terminators or None if
    the text already had only ``\\n`` endings and a final newline)."""
    if "\r" not in text and (not text or text.endswith("\n")):
        return text, None
    lines = io.StringIO(text, newline="").readlines()
    eols = []
    body = []
    for ln in lines:
        if ln.endswith("\r\n"):
            eols.append("\r\n")
            body.append(ln[:-2])
        elif ln.endswith(("\n", "\r")):
            eols.append(ln[-1])
            body.append(ln[:-1])
        else:
            eols.append("")
            body.append(ln)
    return "\n".join(body) + "\n", eols


def restore_eols(text: str, eols: list[str] | None) -> str:
    """Inverse of ``split_eols`` for a rewrite of its normalised text."""
    if eols is None:
        return text
    parts = text.split("\n")
    if parts[-1] != "" or len(parts) - 1 != len(eols):
        raise ValueError(f"the rewrite changed the number of lines ({len(eols)} -> "
                         f"{len(parts) - 1}); file left unchanged")
    return "".join(p + e for p, e in zip(parts, eols))

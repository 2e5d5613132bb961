"""Where in the user's code something happened: the innermost Python frame that
belongs to the user's files (under the script's folder), else the innermost one
outside torch, torch_musa and the standard library."""
from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import torch

_LIBRARY_ROOTS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {os.path.dirname(torch.__file__), str(Path(__file__).resolve().parents[2]),  # torch_musa/
              sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]}
)


class UserCode:
    """Tells the user's frames from library frames; ``roots``: the user's folders."""

    def __init__(self, roots: list[str]):
        self.roots = tuple(str(Path(r).resolve()) + os.sep for r in roots)
        self._cache: dict[str, int] = {}

    def _rank(self, filename: str) -> int:
        """2: a user file, 1: other code outside the libraries, 0: library or synthetic."""
        r = self._cache.get(filename)
        if r is None:
            if filename.startswith("<"):
                r = 0
            else:
                path = str(Path(filename).resolve())
                if path.startswith(_LIBRARY_ROOTS):
                    r = 0
                elif any(path.startswith(root) for root in self.roots):
                    r = 2
                else:
                    r = 1
            self._cache[filename] = r
        return r

    def site(self, frame=None) -> str | None:
        """``file:line`` of the innermost user frame above ``frame`` (the caller's by default)."""
        f = frame or sys._getframe(1)
        fallback = None
        while f is not None:
            rank = self._rank(f.f_code.co_filename)
            if rank == 2:
                return f"{f.f_code.co_filename}:{f.f_lineno}"
            if rank == 1 and fallback is None:
                fallback = f"{f.f_code.co_filename}:{f.f_lineno}"
            f = f.f_back
        return fallback

    def site_of_traceback(self, tb) -> str | None:
        """The innermost user frame of an exception's traceback."""
        best = None
        while tb is not None:
            if self._rank(tb.tb_frame.f_code.co_filename) == 2:
                best = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
            tb = tb.tb_next
        return best

    def is_user_file(self, filename: str) -> bool:
        return self._rank(filename) == 2

"""The sync collector: host<->device synchronisations, as sync debug mode reports them.

It turns ``torch.musa.set_sync_debug_mode("warn")`` on and takes each of its
warnings (one per synchronising call, as CUDA's) instead of printing it, with the
user's line; other warnings pass through untouched.
"""
from __future__ import annotations

import re
import sys
import warnings

import torch

from torch_musa.utils.doctor.frames import UserCode

MESSAGE = "called a synchronizing MUSA operation"
_INTERNAL = " (Triggered internally"


class SyncRecorder:
    def __init__(self, user: UserCode):
        self.user = user
        self.per_step: list[int] = [0]
        self.sites: dict[tuple[str, str | None], int] = {}
        self._saved = None
        #: where a sync without user frames (on autograd's threads) came from; set by the session
        self.fallback_site = lambda: None

    def close_step(self) -> None:
        self.per_step.append(0)

    def __enter__(self):
        self._saved = (torch.musa.get_sync_debug_mode(), warnings.showwarning, warnings.filters[:])
        warnings.filterwarnings("always", message=re.escape(MESSAGE))
        passthrough = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            text = str(message)
            if not text.startswith(MESSAGE):
                return passthrough(message, category, filename, lineno, file, line)
            what = text.split(_INTERNAL)[0][len(MESSAGE):].strip()
            what = what[1:-1] if what.startswith("(") and what.endswith(")") else what
            key = (what, self.user.site(sys._getframe(1)) or self.fallback_site())
            self.sites[key] = self.sites.get(key, 0) + 1
            self.per_step[-1] += 1

        warnings.showwarning = showwarning
        torch.musa.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc):
        mode, warnings.showwarning, warnings.filters[:] = self._saved
        torch.musa.set_sync_debug_mode(mode)
        return False

    def to_json(self) -> dict:
        rows = sorted(self.sites.items(), key=lambda kv: -kv[1])
        return {"per_step": [n for n in self.per_step], "total": sum(self.per_step),
                "sites": [{"what": w, "site": s, "calls": n} for (w, s), n in rows]}

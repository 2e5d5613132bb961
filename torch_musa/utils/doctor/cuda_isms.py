"""The CUDA-isms collector: the ``torch.cuda`` APIs the user's code called that
the compat layer answered from musa (counted at the user's call sites), and
what ``musa-converter`` would rewrite or asks a person to review in the script's
files (the review list it shares with ``cuda_compat.limitations()``)."""
from __future__ import annotations

import functools
import inspect
import sys
from collections import Counter
from pathlib import Path

import torch

from torch_musa import cuda_compat
from torch_musa.utils.doctor.frames import UserCode
from torch_musa.utils.musa_converter import convert_source


class CudaApiRecorder:
    """Counts user calls of ``torch.cuda.*`` functions while the compat layer is on.

    ``Tensor.cuda`` stays unwrapped: PyTorch looks the method up on ``torch.Tensor``
    by name to hand it to the compat layer's TorchFunctionMode, which must find its
    own; the converter's rewrite counts list those calls instead."""

    def __init__(self, user: UserCode):
        self.user = user
        self.calls: Counter = Counter()
        self._saved: list = []

    def __enter__(self):
        if not cuda_compat.is_enabled():
            return self
        targets = [(torch.cuda, n) for n, v in vars(torch.cuda).items()
                   if not n.startswith("_") and inspect.isfunction(v)]
        for owner, name in targets:
            orig = getattr(owner, name)
            label = f"torch.cuda.{name}"
            self._saved.append((owner, name, orig))
            setattr(owner, name, self._wrap(orig, label))
        return self

    def _wrap(self, fn, label):
        user = self.user

        @functools.wraps(fn)
        def counted(*args, **kwargs):
            caller = sys._getframe(1)
            if user.is_user_file(caller.f_code.co_filename):
                self.calls[(label, f"{caller.f_code.co_filename}:{caller.f_lineno}")] += 1
            return fn(*args, **kwargs)
        return counted

    def __exit__(self, *exc):
        for owner, name, orig in reversed(self._saved):
            setattr(owner, name, orig)
        return False

    def to_json(self) -> list[dict]:
        return [{"api": api, "site": site, "calls": n} for (api, site), n in self.calls.most_common()]


def converter_review(files: list[str]) -> dict:
    """What musa-converter says about ``files``: rewrites per rule and lines to review."""
    titles = {i["id"]: i["title"] for i in cuda_compat.limitations()}
    rewrites: Counter = Counter()
    review = []
    for f in files:
        try:
            r = convert_source(Path(f).read_text(), filename=f)
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        rewrites.update(r.counts)
        review += [{"site": f"{f}:{i['line']}", "id": i["id"], "title": titles.get(i["id"], ""),
                    "text": i["text"]} for i in r.review]
    return {"rewrites": dict(rewrites.most_common()), "review": review}

"""Deliberately wrong ops: right on CPU, perturbed on musa."""
import functools

import torch


def perturb_on_musa(fn, index=0, delta=1e-2, output=None):
    """``fn`` whose musa result has ``delta`` added at flat ``index`` (of output ``output``
    when ``fn`` returns several)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        res = fn(*args, **kwargs)
        target = res if output is None else res[output]
        if target.device.type == "musa":
            bad = target.detach().clone()
            bad.view(-1)[index] += delta
            if output is None:
                return bad
            res = list(res)
            res[output] = bad
            return tuple(res)
        return res

    wrapped.__name__ = getattr(fn, "__name__", "op")
    return wrapped

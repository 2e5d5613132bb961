"""The operator layer: which ops musa serves natively, which fall back, and how.

``fallback_stats()`` says which ops reached the CPU fallback and how often;
``coverage()`` lists the registry's native ops, the dtypes the hardware profile
refuses, and the ops that fell back.
"""
from __future__ import annotations

from torch_musa import _C, _driver
from torch_musa.config import CONFIG
from torch_musa.ops import kernels
from torch_musa.ops.dtype_policy import DTYPE_AGNOSTIC_OPS


def fallback_stats() -> dict[str, int]:
    """Calls per op that ran through the CPU fallback since start (or reset)."""
    return dict(sorted(_C._fallback_counts(), key=lambda kv: (-kv[1], kv[0])))


def reset_fallback_stats() -> None:
    _C._reset_fallback_counts()


def coverage() -> dict:
    """What is known about the musa operators in this configuration.

    ``native``: every op with a musa kernel of its own under this driver, as
    musa_functions.yaml lists them (generated entries, and the hand-written C++ and Python
    kernels: ``strategy`` says which), each run on the driver's kernel device (the CPU's on
    the host driver, CUDA's under the cuda driver), so in the dtypes that kernel has. ``profile_refuses``: the
    dtypes the hardware profile refuses to compute in, for every op, native or fallback,
    except the ``dtype_agnostic`` ones, which move or select data in any dtype (float64
    computes in float32 instead while double casting is on). ``fallback``: calls per op
    that took the CPU fallback.
    """
    strategy = kernels.served()
    return {"profile": CONFIG.profile.name, "driver": _driver.NAME, "native": list(strategy),
            "strategy": strategy,
            "profile_refuses": [str(d).replace("torch.", "") for d in CONFIG.profile.unsupported_dtypes()],
            "dtype_agnostic": sorted(DTYPE_AGNOSTIC_OPS), "fallback": fallback_stats()}

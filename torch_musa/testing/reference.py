"""What a musa run is checked against: the same run on the device whose kernels
the driver runs.

Under the host driver that is the CPU device: the kernels are the CPU's and musa
draws the CPU generator's numbers, so a musa run equals the CPU's bit for bit.
Under the cuda driver musa runs CUDA's kernels on the GPU and draws from CUDA's
default generator, so the reference is the same run on ``cuda`` (the CPU's bits
are out of reach there: other kernels, another generator). GPU reductions that
add with atomics may round differently from one run to the next, hence a few
float32 units in the last place of slack under that driver.
"""
from __future__ import annotations

from torch_musa.config import CONFIG

__all__ = ["reference_device", "reference_tolerance"]

_KERNEL_DEVICE = {"host": "cpu", "cuda": "cuda"}


def reference_device() -> str:
    """``"cpu"`` under the host driver, ``"cuda"`` under the cuda driver."""
    return _KERNEL_DEVICE[CONFIG.driver]


def reference_tolerance() -> dict[str, float]:
    """``assert_close`` keywords for a musa run against :func:`reference_device`'s."""
    if CONFIG.driver == "host":
        return {"rtol": 0.0, "atol": 0.0}
    return {"rtol": 1e-5, "atol": 1e-6}

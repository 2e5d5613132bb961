"""What a musa result is checked against, under each driver.

Under the host driver musa runs the CPU's kernels and draws the CPU generator's
numbers, so a musa run equals the CPU device's bit for bit. Under the cuda driver
musa runs CUDA's kernels and draws from CUDA's generator: a forward computation
answers exactly as on ``cuda`` (:func:`kernel_device`), and against the CPU it
agrees to rounding (:func:`cpu_tolerance`). Training runs are compared with the
CPU even there: PyTorch's autograd engine serves the streams of one accelerator,
musa, so backward over ``cuda`` tensors fails in a process that has musa.
"""
from __future__ import annotations

import torch

from torch_musa._driver import KERNEL_DEVICE
from torch_musa.testing.tolerances import tolerance

__all__ = ["kernel_device", "cpu_tolerance"]

def kernel_device() -> str:
    """The device whose kernels musa runs: ``"cpu"`` or ``"cuda"``."""
    return KERNEL_DEVICE


def cpu_tolerance(dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """``assert_close`` keywords for a musa run in ``dtype`` against the CPU's: exact
    under the host driver. Under the cuda driver, float32: a few training steps on
    cuBLAS and cuDNN kernels, whose differences from the CPU's (about 1e-7 relative
    per op) grow with the steps; half precision: the policy's tolerance, twice (the
    GPU's rounding and the CPU's)."""
    if KERNEL_DEVICE == "cpu":  # the CPU's own kernels
        return {"rtol": 0.0, "atol": 0.0}
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-5}
    rtol, atol = tolerance(dtype)
    return {"rtol": 2 * rtol, "atol": 2 * atol}

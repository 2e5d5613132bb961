"""Which driver serves the device: the one place Python asks.

C++ reaches its driver through one interface (``csrc/driver/Driver.h``). Python has a
few subsystems whose implementation differs by driver: the host driver's asks the musa
runtime (``_C``); the cuda driver's forwards to the GPU's own runtime, since there musa
memory is CUDA's caching allocator, musa streams are CUDA streams and the kernels are
CUDA's (``torch.cuda``'s memory history and pools, graphs, backend switches, NVML,
TunableOp; the GPU's SDPA kernels; NCCL). Each such module defines one implementation
per driver and takes, at import, the one :func:`pick` returns. Nothing outside
``torch_musa/config``, ``torch_musa/_runtime.py`` and this module compares the driver's
name (``tests/test_driver_seam.py`` keeps it so). A new driver adds its keyword to
:func:`pick`, which then fails at each call site that has no implementation for it
(``grep -rn "pick(" torch_musa`` lists them).
"""
from __future__ import annotations

from typing import TypeVar

from torch_musa import _C
from torch_musa.config import CONFIG

_T = TypeVar("_T")

#: The configured driver's name, for reports (``torch.musa.version.driver``).
NAME: str = CONFIG.driver


def pick(*, host: _T, cuda: _T) -> _T:
    """This process's driver's implementation, of one given per driver."""
    return {"host": host, "cuda": cuda}[CONFIG.driver]


#: The device type the kernels run on, which a musa tensor's kernel alias has
#: (``_C._kernel_alias``): the CPU under the host driver, CUDA under the cuda driver.
KERNEL_DEVICE: str = pick(host="cpu", cuda="cuda")


def serves_configured_driver() -> bool:
    """Whether the loaded C++ runtime (``torch_musa._C``) runs the configured driver."""
    return _C._driver_name() == CONFIG.driver

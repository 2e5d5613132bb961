"""``torch_musa._export``: the real torch_musa's ``aot_load(so_path, device)``.

For ``"cpu"`` it is ``torch._export.aot_load``. A musa model is deployed as a
package: ``torch._inductor.aoti_compile_and_package`` and ``aoti_load_package``
(or ``torch_musa._inductor.package.load_package``); a bare ``.so`` from
``aot_compile`` is refused on musa with that advice, as PyTorch has deprecated
``aot_load`` for packages.
"""
from __future__ import annotations

from collections.abc import Callable

from torch_musa._inductor.package import _device_index

__all__ = ["aot_load", "MUSA_SO_UNSUPPORTED"]

MUSA_SO_UNSUPPORTED = (
    "aot_load of a bare .so is not supported on musa: compile the model with "
    "torch._inductor.aoti_compile_and_package(torch.export.export(model, args)) and load "
    "the .pt2 with torch._inductor.aoti_load_package (C++: "
    "torch::inductor::AOTIModelPackageLoader).")


def aot_load(so_path: str, device: str) -> Callable:
    """Load a library made by ``aot_compile`` for the CPU and return a callable running it."""
    if _device_index(device) >= 0 or device != "cpu":
        raise RuntimeError(MUSA_SO_UNSUPPORTED)
    import torch._export  # noqa: PLC0415

    return torch._export.aot_load(so_path, device)

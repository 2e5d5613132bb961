"""Inductor's C++ wrapper for musa (``cpp_wrapper=True`` and AOTInductor).

Not implemented: the C++ wrapper calls ATen through AOTInductor's C shim, which
PyTorch generates per device (``aoti_torch_cpu_*``, ``aoti_torch_cuda_*``) and
has none for a PrivateUse1 device, and its runtime headers name devices by
their built-in types. Until musa has its own shim, the wrapper says so at
compile time instead of emitting code that cannot build.
"""
from __future__ import annotations

from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

__all__ = ["MusaCppWrapperCpu", "UNSUPPORTED"]

UNSUPPORTED = (
    "Inductor's C++ wrapper (torch._inductor.config.cpp_wrapper=True, and AOTInductor: "
    "aoti_compile_and_package / aoti_load_package) is not available for the musa device: "
    "AOTInductor's C shim has no functions for a PrivateUse1 device. Compile with the "
    "default Python wrapper (torch.compile), or export and compile for the CPU device "
    "(model.cpu()), which shares musa's host memory under the host driver.")


class MusaCppWrapperCpu(CppWrapperCpu):
    """Raises ``UNSUPPORTED`` when Inductor asks for it."""

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        raise RuntimeError(UNSUPPORTED)

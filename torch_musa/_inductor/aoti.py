"""Inductor's C++ wrapper for musa (``cpp_wrapper=True`` and AOTInductor).

Not implemented. What stands in the way, found by running PyTorch 2.13's C++ wrapper
(``CppWrapperCpu``) for musa:

* code generation: ``CppWrapperCpu.codegen_device`` knows only the devices of
  ``cpp_utils.DEVICE_TO_ATEN`` (cpu, cuda, xpu, mps, meta); naming musa
  ``privateuse1`` there gets further, but the wrapper is written for one model device
  (``self.device = "cpu"``) and refuses constants on another ("Mixed-device constants
  are only supported when the secondary device is CPU");
* ``cpp_wrapper=True``: the generated source includes
  ``torch/csrc/inductor/cpp_wrapper/<device>.h`` (no ``musa.h`` exists) and calls ATen
  through the C shim PyTorch generates per device (``aoti_torch_cpu_*``,
  ``aoti_torch_cuda_*``), none for a PrivateUse1 device;
* the AOTInductor runtime compiled into every package: ``model_base.h``'s
  ``parse_device_str`` accepts ``cpu|cuda|xpu|mps`` only, and ``aoti_load_package``
  finds a runner by device type in ``getAOTIModelRunnerRegistry()``, which has no
  PrivateUse1 entry (one would be registered from C++ with ``RegisterAOTIModelRunner``).

Until those exist, the wrapper says so at compile time instead of emitting code that
cannot build.
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

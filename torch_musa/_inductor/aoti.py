"""Inductor's C++ wrapper for musa: AOTInductor packages and ``cpp_wrapper=True``.

The route: compile the graph for the kernel device, run it on musa memory.

Under the host driver musa memory is host RAM and every musa kernel is the CPU's
kernel run on a zero-copy CPU alias of it (``csrc/aten/kernel_call.h``). So a musa
graph that needs the C++ wrapper is moved to the CPU (its device arguments and fake
values become ``cpu``: ``kernel_device.move_graph``, the cuda driver's mechanism) and
compiled by Inductor's own CPU path, unchanged: the CPU's C shim
(``aoti_torch_cpu_*``), the CPU's AOTInductor runtime, the same kernels as compiled
CPU code, so the outputs are those of the CPU device. At run time the musa tensors
cross the boundary as they do for every eager op:

* ``torch.compile`` with ``cpp_wrapper=True``: the compiled CPU module is called
  with CPU aliases of its musa inputs and its results come back as musa tensors
  (``kernel_device._OnMusa``);
* AOTInductor: the package's metadata names ``musa`` as its device
  (``AOTI_DEVICE_KEY``) and the CPU as its kernel device
  (``AOTI_MUSA_KERNEL_DEVICE``), so ``aoti_load_package`` and C++'s
  ``AOTIModelPackageLoader`` pick the runner libtorch_musa registers for ``musa``
  (``csrc/aten/aoti_runner.cpp``): the CPU runner, called as one op of the op
  path (inputs aliased, the model's allocations from the musa pool, results
  adopted as musa tensors). A C++ program gets it by linking libtorch_musa.

The other route, a C shim for PrivateUse1, would mean generating and building
``aoti_torch_musa_*`` for every fallback op, a ``musa.h`` for the wrapper, and a
runtime whose ``parse_device_str`` knows musa: that is patching PyTorch (the real
torch_musa does), and under the host driver each of those functions would end in
the CPU's kernel anyway.

The cuda driver's kernel device is CUDA: the same move gives a CUDA package (Triton
kernels, ``aoti_torch_cuda_*``), and the musa runner is then built on CUDA's
(``AOTIModelContainerRunnerCuda``, libtorch_cuda, which libtorch_musa links under that
driver), over CUDA aliases of the musa inputs, on the current musa stream (a CUDA
stream there). A package runs under the driver that compiled it; the runner says so
when asked otherwise.
"""
from __future__ import annotations

import json
import os

from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

__all__ = ["MusaCppWrapperCpu", "DEVICE_KEY", "KERNEL_DEVICE_KEY",
           "wants_cpp_wrapper", "mark_musa_package"]

#: The package metadata entries the musa runner reads.
DEVICE_KEY = "AOTI_DEVICE_KEY"
KERNEL_DEVICE_KEY = "AOTI_MUSA_KERNEL_DEVICE"

def wants_cpp_wrapper(inner_kwargs: dict) -> bool:
    """Whether the graph being compiled gets Inductor's C++ wrapper (AOTInductor, or
    ``cpp_wrapper=True``, which ``compile_fx`` hands the inner compile as an argument)."""
    import torch._inductor.config as config
    from torch._inductor.virtualized import V

    return bool(getattr(V, "aot_compilation", False) or inner_kwargs.get("cpp_wrapper")
                or config.cpp_wrapper)


def _metadata_files(filename) -> list[str]:
    if isinstance(filename, (list, tuple)):
        return [f for f in filename if isinstance(f, str) and f.endswith("_metadata.json")]
    if isinstance(filename, str) and filename.endswith(".so"):
        return [os.path.splitext(filename)[0] + "_metadata.json"]
    return []


def mark_musa_package(compiled, kernel_device: str) -> None:
    """Name musa as the device of an AOTInductor model compiled for ``kernel_device``.

    Inductor writes the device it compiled for as ``AOTI_DEVICE_KEY`` in the
    metadata files it packages; the loader picks a runner by that key.
    """
    import torch
    from torch._inductor.codecache import get_device_information

    device = torch._C._get_privateuse1_backend_name()
    # The loader compares these with the loading machine's, for the package's device.
    device_information = get_device_information(device)
    files = [f for f in _metadata_files(getattr(compiled, "filename", None)) if os.path.exists(f)]
    if not files:
        raise RuntimeError("AOTInductor on musa: the compiled model carries no metadata file "
                           f"to name the musa device in (got {getattr(compiled, 'filename', None)!r})")
    for path in files:
        with open(path) as f:
            metadata = json.load(f)
        metadata.update(device_information)
        metadata[DEVICE_KEY] = device
        metadata[KERNEL_DEVICE_KEY] = kernel_device
        text = json.dumps(metadata)
        with open(path, "w") as f:
            f.write(text)


class MusaCppWrapperCpu(CppWrapperCpu):
    """Inductor's C++ wrapper entry for the musa device; never used to generate code.

    Every graph that needs the C++ wrapper is moved to the kernel device before
    Inductor lowers it, so reaching this is a bug in that move.
    """

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        raise RuntimeError(
            "Inductor's C++ wrapper was asked to generate code for a musa graph; musa graphs "
            "are compiled as graphs of the kernel device (torch_musa/_inductor/aoti.py). "
            "Please report the model.")

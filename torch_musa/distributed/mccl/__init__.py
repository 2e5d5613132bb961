"""``mccl``: the collective backend for ``musa`` tensors (``torch.musa.mccl``).

On the host driver, device memory is host RAM, so mccl carries no collective
engine of its own: it runs PyTorch's Gloo on zero-copy aliases of the musa
tensors. Under the cuda driver musa memory is GPU memory and the engine is NCCL
(or Gloo on staged host copies when ranks share a GPU, see :func:`engine`).

Modules, each importing only those above it:

* ``errors``: :class:`MCCLError` and messages naming the collective and tensors;
* ``aliases``: the tensors the engine reads (aliases, or staged host copies);
* ``works``: the Works and futures of asynchronous calls, the completer threads;
* ``signature``: the cross-rank check of each collective signature's first use;
* ``kernels``: the Python c10d kernels (every op but the four hot ones, which are
  C++: ``csrc/mccl_ops.cpp``, registered when ``torch_musa.distributed._C`` loads);
* ``backend``: engine choice, the process-group factory, :func:`install`.
"""
from torch_musa.distributed.mccl.backend import NATIVE_OPS, VERSION, engine, install, is_available, version
from torch_musa.distributed.mccl.errors import MCCLError
from torch_musa.distributed.mccl.signature import first_use_check as _first_use_check  # noqa: F401  (C++ calls it)
from torch_musa.distributed.mccl.signature import stalled as _stalled  # noqa: F401  (C++ calls it)

__all__ = ["version", "is_available", "engine", "install", "MCCLError", "VERSION", "NATIVE_OPS"]

"""torch_musa: the ``musa`` accelerator device for stock PyTorch.

Importing this package (or ``import torch`` with PyTorch's backend autoload)
registers the device: the runtime core (torch_musa._C), the ``musa`` name,
``torch.musa`` and the tensor/module/storage methods.
"""
from __future__ import annotations


def _autoload() -> None:
    """Entry point for PyTorch's ``torch.backends`` autoload.

    Defined before ``import torch``: when this package is imported first, torch's
    own autoload looks it up while this module is still initialising.
    """


import torch  # noqa: E402

__version__ = "0.1.0"

from torch_musa.config import CONFIG as _CONFIG  # noqa: E402  (reads the environment, once)
from torch_musa import _C, _runtime  # noqa: E402

_runtime.configure()
_C._register_device()
torch.utils.rename_privateuse1_backend("musa")

from torch_musa import core as _musa_module  # noqa: E402
from torch_musa.core import backends as _backends  # noqa: E402
from torch_musa.core import dlpack as _dlpack  # noqa: E402
from torch_musa.core import jit as _jit  # noqa: E402
from torch_musa.core import printing as _printing  # noqa: E402
from torch_musa.core import serialization as _serialization  # noqa: E402
from torch_musa.ops import dtype_policy as _dtype_policy  # noqa: E402
from torch_musa.ops import fallback_routes as _fallback_routes  # noqa: E402
from torch_musa.ops import half_upcast as _half_upcast  # noqa: E402
from torch_musa.ops import int_histc as _int_histc  # noqa: E402
from torch_musa.ops import registry as _registry  # noqa: E402
from torch_musa.ops import rnn_cells as _rnn_cells  # noqa: E402
from torch_musa.ops import sync_batch_norm as _sync_batch_norm  # noqa: E402
from torch_musa.ops import rnn_layers as _rnn_layers  # noqa: E402
from torch_musa.ops import cpu_only_checks as _cpu_only_checks  # noqa: E402

torch._register_device_module("musa", _musa_module)


def _musa_extension_name(name: str):
    def load():
        import torch_musa.utils.musa_extension as ext  # noqa: PLC0415  (setuptools: ~0.4 s)

        return getattr(ext, name)

    return load


_musa_module._provided.update({n: _musa_extension_name(n) for n in ("BuildExtension", "MUSAExtension")})
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)
_C._set_dtype_exempt_ops(sorted(_dtype_policy.DTYPE_AGNOSTIC_OPS))
_fallback_routes.install()
_registry.register_customized()
_rnn_cells.install()  # the fused LSTM/GRU cells PyTorch has only for CUDA
_rnn_layers.install()  # tanh/ReLU RNN layers in the CPU's op order (host driver)
_cpu_only_checks.install()  # argument checks PyTorch's composites make only on the CPU
_half_upcast.install()  # float16/bfloat16 where the CPU's kernels lack them, in float32
_int_histc.install()  # integer histc, which CUDA has and the CPU lacks
_sync_batch_norm.install()  # SyncBatchNorm's CUDA-only kernels
_registry.configure()  # fallback policy, double cast, op debug log
_printing.install()
_dlpack.install()  # Tensor.__dlpack__ / __dlpack_device__ for the renamed device
_serialization.install()  # torch.load onto musa: storages of the saved size, not resizable (as the CPU's)
_musa_module.comm.install()  # torch.nn.parallel (DataParallel) across musa devices
_jit.install()  # torch.jit.trace's check compares without the profile's missing dtypes
_backends.install()  # torch.backends.musa and torch.backends.mudnn

from torch_musa import amp as _amp  # noqa: E402
from torch_musa import attention as _attention  # noqa: E402

_amp.register()  # AutocastPrivateUse1 kernels, GradScaler without float64, torch.musa.amp
if _CONFIG.driver == "host":
    _attention.register()  # SDPA backend choice and the flash kernels
else:
    from torch_musa.attention import gpu as _attention_gpu

    _attention_gpu.register()  # the GPU's flash / memory-efficient / cuDNN kernels

from torch_musa import distributed as _distributed  # noqa: E402

_distributed.register()  # the mccl backend

from torch_musa import _inductor  # noqa: E402

_inductor.install()  # torch.compile's Inductor backend, registered when dynamo/Inductor load

try:  # profiler activity alias, as torch_musa spells it
    torch.profiler.ProfilerActivity.MUSA = torch.profiler.ProfilerActivity.PrivateUse1
except (AttributeError, TypeError):
    pass


if _CONFIG.cuda_compat:
    # Only under the switch: a plain `import torch_musa.cuda_compat` later must
    # still find the module unloaded, since importing it is what enables it.
    from torch_musa import cuda_compat as _cuda_compat

    _cuda_compat.maybe_enable_from_env()

__all__ = ["__version__"]


def __getattr__(name: str):
    """The real torch_musa is ``torch.musa`` itself, so its top-level names
    (``torch_musa.set_device``, ``torch_musa.is_available``, ``torch_musa.ByteTensor``, ...)
    are torch.musa's."""
    try:
        return getattr(_musa_module, name)
    except AttributeError:
        raise AttributeError(f"module 'torch_musa' has no attribute {name!r}") from None

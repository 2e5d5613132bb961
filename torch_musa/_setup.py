"""The package's body: registers the musa device (``import torch_musa`` runs it once the
configuration has been read; see ``torch_musa/__init__.py``)."""
import torch

from torch_musa.config import CONFIG as _CONFIG
from torch_musa import _C, _runtime

_runtime.configure()
_C._register_device()
torch.utils.rename_privateuse1_backend("musa")

from torch_musa import core as _musa_module
from torch_musa.core import backends as _backends
from torch_musa.core.ao import register_helper as _ao_register
from torch_musa.core import dlpack as _dlpack
from torch_musa.core import jit as _jit
from torch_musa.core import printing as _printing
from torch_musa.core import profiler_utils as _profiler_utils
from torch_musa.core import serialization as _serialization
from torch_musa.ops import dtype_policy as _dtype_policy
from torch_musa.ops import fallback_routes as _fallback_routes
from torch_musa.ops import fake_convolution as _fake_convolution
from torch_musa.ops import kernels as _kernels
from torch_musa.ops import registry as _registry
from torch_musa.ops import vendor as _vendor

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
_kernels.install()  # musa_functions.yaml's Python kernels (RNN cells, half upcasts, histc, ...)
_vendor.install()  # the real torch_musa's additions: torch.gated_silu, F.swish_glu, F.rope, nn.RoPE
_fake_convolution.install()  # traced convolutions promise the layout musa's kernel gives
_registry.configure()  # fallback policy, double cast, op debug log
_printing.install()
_dlpack.install()  # Tensor.__dlpack__ / __dlpack_device__ for the renamed device
_serialization.install()  # torch.load onto musa: storages of the saved size, not resizable (as the CPU's)
_musa_module.comm.install()  # torch.nn.parallel (DataParallel) across musa devices
_jit.install()  # torch.jit.trace's check compares without the profile's missing dtypes
_backends.install()  # torch.backends.musa and torch.backends.mudnn
_profiler_utils.install()  # torch.profiler._utils.BasicEvaluation reads musa launches and kernels
_ao_register._register_ao_intrinsic_modules()  # torch.ao.nn.intrinsic{,.qat,.quantized}.ConvSiLU2d & co

from torch_musa import amp as _amp
from torch_musa import attention as _attention

_amp.register()  # AutocastPrivateUse1 kernels, GradScaler without float64, torch.musa.amp
_attention.register()  # SDPA: musa's choice and flash kernels, or the GPU's under the cuda driver

from torch_musa import distributed as _distributed

_distributed.register()  # the mccl backend

from torch_musa import _inductor

_inductor.install()  # torch.compile's Inductor backend, registered when dynamo/Inductor load

from torch_musa import integrations as _integrations

_integrations.install()  # libraries with their own device lists (Hugging Face kernels), hooked on import

try:  # profiler activity alias, as torch_musa spells it
    torch.profiler.ProfilerActivity.MUSA = torch.profiler.ProfilerActivity.PrivateUse1
except (AttributeError, TypeError):
    pass


if _CONFIG.cuda_compat:
    # Only under the switch: a plain `import torch_musa.cuda_compat` later must
    # still find the module unloaded, since importing it is what enables it.
    from torch_musa import cuda_compat as _cuda_compat

    _cuda_compat.maybe_enable_from_env()


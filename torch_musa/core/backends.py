"""``torch.backends.musa`` and ``torch.backends.mudnn``: the switches users set for
``torch.backends.cuda`` / ``torch.backends.cudnn``, under musa's names.

* ``torch.backends.musa.matmul.allow_tf32``, ``allow_fp16_reduced_precision_reduction``,
  ``allow_bf16_reduced_precision_reduction`` (accelerate sets ``allow_tf32`` whenever
  a dynamo backend is chosen) and ``torch.backends.mudnn.allow_tf32``.
  Under the cuda driver musa's matmuls and convolutions are cuBLAS's and cuDNN's,
  so these are CUDA's own switches. Under the host driver the kernels are the
  CPU's, which compute float32 in full precision whatever the switch says: the
  values are kept (and read back) but change no result.
* The SDPA backend switches, as ``torch.backends.cuda`` names them. They are
  PyTorch's global flags, the ones ``torch.nn.attention.sdpa_kernel`` sets and
  ``torch_musa.attention`` reads: musa's flash kernel answers to both
  ``FLASH_ATTENTION`` and ``OVERRIDEABLE``, so ``enable_flash_sdp`` sets both and
  ``flash_sdp_enabled`` is true when either is.
"""
from __future__ import annotations

import sys
import types
from typing import Any

import torch

from torch_musa._driver import pick
from torch_musa.core import mudnn as _mudnn

__all__ = [
    "is_built", "matmul", "preferred_linalg_library",
    "enable_flash_sdp", "flash_sdp_enabled", "enable_mem_efficient_sdp",
    "mem_efficient_sdp_enabled", "enable_math_sdp", "math_sdp_enabled",
    "enable_cudnn_sdp", "cudnn_sdp_enabled", "allow_fp16_bf16_reduction_math_sdp",
    "fp16_bf16_reduction_math_sdp_allowed", "sdp_kernel", "mudnn", "install",
]


def is_built() -> bool:
    """Whether PyTorch has musa support: always, once torch_musa is imported."""
    return True


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"torch.backends.musa.matmul.{name} takes a bool, got {type(value).__name__}")
    return value


class _HostSwitches:
    """The host driver's: musa keeps its switches itself (its kernels are the host's own)."""

    @staticmethod
    def matmul_get(module, name: str):
        return module._host[name]

    @staticmethod
    def matmul_set(module, name: str, value: Any) -> None:
        if name != "allow_tf32" and isinstance(value, (tuple, list)) and value:
            value = value[0]  # (allow_reduced_precision, allow_splitk), as CUDA takes it
        module._host[name] = _bool(name, value)

    @staticmethod
    def preferred_linalg_library(backend):
        if backend is not None:
            name = backend if isinstance(backend, str) else str(backend).rsplit(".", 1)[-1].lower()
            if name.lower() != "default":
                raise RuntimeError(f"preferred_linalg_library: the musa host driver has one linalg "
                                   f"library ('default', the CPU's LAPACK); got {backend!r}")
        return torch._C._LinalgBackend.Default

    @staticmethod
    def mudnn_get(module, name: str):
        return module._host[name]

    @staticmethod
    def mudnn_set(module, name: str, value: bool) -> None:
        module._host[name] = value


class _CudaSwitches:
    """The cuda driver's: CUDA's own switches (its kernels are cuBLAS's and cuDNN's)."""

    @staticmethod
    def matmul_get(module, name: str):
        return getattr(torch.backends.cuda.matmul, name)

    @staticmethod
    def matmul_set(module, name: str, value: Any) -> None:
        setattr(torch.backends.cuda.matmul, name, value)

    @staticmethod
    def preferred_linalg_library(backend):
        return torch.backends.cuda.preferred_linalg_library(backend)

    @staticmethod
    def mudnn_get(module, name: str):
        if name in ("deterministic",):
            return torch.backends.cudnn.deterministic
        return getattr(torch.backends.cudnn, name)

    @staticmethod
    def mudnn_set(module, name: str, value: bool) -> None:
        setattr(torch.backends.cudnn, name, value)


_SWITCHES = pick(host=_HostSwitches, cuda=_CudaSwitches)


class MatmulModule:
    """``torch.backends.musa.matmul`` (torch.backends.cuda.matmul's switches)."""

    _NAMES = ("allow_tf32", "allow_fp16_reduced_precision_reduction",
              "allow_bf16_reduced_precision_reduction")

    def __init__(self):
        # The host driver's own values; CUDA's defaults (tf32 off, reduced-precision reductions on).
        object.__setattr__(self, "_host", {"allow_tf32": False,
                                           "allow_fp16_reduced_precision_reduction": True,
                                           "allow_bf16_reduced_precision_reduction": True})

    def __getattr__(self, name: str):
        if name not in MatmulModule._NAMES:
            raise AttributeError(f"torch.backends.musa.matmul has no attribute {name!r}; "
                                 f"it has {', '.join(MatmulModule._NAMES)}")
        return _SWITCHES.matmul_get(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in MatmulModule._NAMES:
            raise AttributeError(f"torch.backends.musa.matmul has no attribute {name!r}; "
                                 f"it has {', '.join(MatmulModule._NAMES)}")
        _SWITCHES.matmul_set(self, name, value)

    def __repr__(self) -> str:
        return "torch.backends.musa.matmul(" + ", ".join(
            f"{n}={getattr(self, n)}" for n in MatmulModule._NAMES) + ")"


matmul = MatmulModule()

_host_linalg = ["default"]


def preferred_linalg_library(backend: None | str | torch._C._LinalgBackend = None):
    """Which linear-algebra library musa's linalg ops use. Under the cuda driver this is
    CUDA's setting; the host driver has one (the CPU's LAPACK), reported as ``Default``."""
    return _SWITCHES.preferred_linalg_library(backend)


# ---------------------------------------------------------------- SDPA switches
def enable_flash_sdp(enabled: bool) -> None:
    """Enable or disable musa's flash attention (PyTorch's FLASH_ATTENTION and
    OVERRIDEABLE flags, which musa's flash kernel both answers to)."""
    torch._C._set_sdp_use_flash(enabled)
    torch._C._set_sdp_use_overrideable(enabled)


def flash_sdp_enabled() -> bool:
    return torch._C._get_flash_sdp_enabled() or torch._C._get_overrideable_sdp_enabled()


def enable_mem_efficient_sdp(enabled: bool) -> None:
    """The memory-efficient kernel (the cuda driver's; the host driver has math and flash)."""
    torch._C._set_sdp_use_mem_efficient(enabled)


def mem_efficient_sdp_enabled() -> bool:
    return torch._C._get_mem_efficient_sdp_enabled()


def enable_math_sdp(enabled: bool) -> None:
    torch._C._set_sdp_use_math(enabled)


def math_sdp_enabled() -> bool:
    return torch._C._get_math_sdp_enabled()


def enable_cudnn_sdp(enabled: bool) -> None:
    """muDNN's attention (the cuda driver's cuDNN kernel; the host driver has none)."""
    torch._C._set_sdp_use_cudnn(enabled)


def cudnn_sdp_enabled() -> bool:
    return torch._C._get_cudnn_sdp_enabled()


def allow_fp16_bf16_reduction_math_sdp(enabled: bool) -> None:
    torch._C._set_math_sdp_allow_fp16_bf16_reduction(enabled)


def fp16_bf16_reduction_math_sdp_allowed() -> bool:
    return torch._C._get_math_sdp_allow_fp16_bf16_reduction()


def sdp_kernel(enable_flash: bool = True, enable_math: bool = True,
               enable_mem_efficient: bool = True, enable_cudnn: bool = True):
    """torch.backends.cuda.sdp_kernel's musa twin (deprecated there too: prefer
    ``torch.nn.attention.sdpa_kernel``). musa's flash also covers OVERRIDEABLE."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = [b for on, bs in ((enable_flash, (SDPBackend.FLASH_ATTENTION, SDPBackend.OVERRIDEABLE)),
                               (enable_mem_efficient, (SDPBackend.EFFICIENT_ATTENTION,)),
                               (enable_math, (SDPBackend.MATH,)),
                               (enable_cudnn, (SDPBackend.CUDNN_ATTENTION,))) if on for b in bs]
    return sdpa_kernel(chosen)


# ---------------------------------------------------------------- torch.backends.mudnn
class _MudnnModule(types.ModuleType):
    """``torch.backends.mudnn`` (torch.backends.cudnn's ``allow_tf32``, ``enabled``,
    ``deterministic``, ``benchmark``; ``version``, ``is_available``, ``set_flags``, ``flags``)."""

    _NAMES = ("allow_tf32", "enabled", "deterministic", "benchmark")
    version = staticmethod(_mudnn.version)
    is_available = staticmethod(_mudnn.is_available)
    set_flags = staticmethod(_mudnn.set_flags)
    flags = staticmethod(_mudnn.flags)

    def __init__(self):
        super().__init__("torch.backends.mudnn", _MudnnModule.__doc__)
        object.__setattr__(self, "_host", {"allow_tf32": False, "enabled": True,
                                           "deterministic": False, "benchmark": False})

    def __getattr__(self, name: str):
        if name not in _MudnnModule._NAMES:
            raise AttributeError(f"torch.backends.mudnn has no attribute {name!r}")
        return _SWITCHES.mudnn_get(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _MudnnModule._NAMES:
            return super().__setattr__(name, value)
        if not isinstance(value, bool):
            raise TypeError(f"torch.backends.mudnn.{name} takes a bool, got {type(value).__name__}")
        _SWITCHES.mudnn_set(self, name, value)


mudnn = _MudnnModule()


def install() -> None:
    """Make this module ``torch.backends.musa`` and ``mudnn`` ``torch.backends.mudnn``
    (attributes and importable names)."""
    this = sys.modules[__name__]
    for name, module in (("musa", this), ("mudnn", mudnn)):
        setattr(torch.backends, name, module)
        sys.modules[f"torch.backends.{name}"] = module

"""Dtype lists: the real torch_musa's fixed ones, and ones that follow the
selected hardware profile (``get_profile_support_types*``).

The profile (``TORCH_MUSA_PROFILE``) decides which dtypes the device can
compute in: s80 has neither bfloat16 nor float64 (s4000 and s5000 have both). The
profile-aware lists leave out what the profile lacks, so a test parametrized over them runs
everywhere; asking for such a dtype explicitly raises
:class:`UnsupportedDtypeError` naming the profile.
"""
from __future__ import annotations

import torch

from torch_musa.config import CONFIG

__all__ = [
    "UnsupportedDtypeError",
    "get_musa_arch",
    "dtype_supported",
    "require_dtype",
    "get_all_support_types",
    "get_all_support_types_withfp16",
    "get_all_support_types_withfp",
    "get_profile_support_types",
    "get_profile_support_types_withfp16",
    "get_all_types",
    "get_float_types",
    "get_raw_data",
    "double_cast_active",
]

LOW_PRECISION = (torch.float16, torch.bfloat16)


class UnsupportedDtypeError(RuntimeError):
    """A dtype was asked for that the selected musa hardware profile cannot compute in."""


def get_musa_arch() -> int:
    """Arch number of the selected hardware profile: 21 (s80), 22 (s4000), 31 (s5000)."""
    return CONFIG.profile.arch


def dtype_supported(dtype: torch.dtype) -> bool:
    """Whether the selected hardware profile can compute in ``dtype``."""
    return dtype not in CONFIG.profile.unsupported_dtypes()


def _profile_hint(dtype: torch.dtype) -> str:
    if dtype in (torch.float64, torch.complex128):
        return ("compute in float32, set TORCH_USE_MUSA_DOUBLE_CAST=1 to compute float64 ops "
                "in float32, or pick a profile with float64 (TORCH_MUSA_PROFILE=s4000 or s5000)")
    return "pick a profile with bfloat16 (TORCH_MUSA_PROFILE=s4000 or s5000)"


def double_cast_active() -> bool:
    """Whether float64 ops on musa are computed in float32 right now (a profile
    without float64 and ``TORCH_USE_MUSA_DOUBLE_CAST`` or ``set_double_cast(True)``)."""
    if CONFIG.profile.supports_fp64:
        return False
    try:
        torch.ones(1, dtype=torch.float64, device="musa").add(1)
        return True
    except RuntimeError:
        return False


def require_dtype(dtype: torch.dtype, what: str = "this test") -> None:
    """Raise :class:`UnsupportedDtypeError` if the profile cannot compute in ``dtype``
    (float64 passes while double casting is on)."""
    if dtype == torch.float64 and not dtype_supported(dtype) and double_cast_active():
        return
    if isinstance(dtype, torch.dtype) and not dtype_supported(dtype):
        p = CONFIG.profile
        raise UnsupportedDtypeError(
            f"{what} asks for {_name(dtype)}, which the musa hardware profile "
            f"{p.name} ({p.key}, arch {p.arch}) does not support; {_profile_hint(dtype)}"
        )


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _supported(dtypes):
    return [d for d in dtypes if dtype_supported(d)]


def get_all_support_types() -> list[torch.dtype]:
    """The real torch_musa's fixed list: float32, int32, int64 (on every profile).

    Tests are written against exactly these three (a test that builds a
    ``value`` scalar from each non-float32 entry relies on no float64 here);
    :func:`get_profile_support_types` adds float64 where the profile has it."""
    return [torch.float32, torch.int32, torch.int64]


def get_all_support_types_withfp16() -> list[torch.dtype]:
    """The real torch_musa's fixed list: float16, float32, int32, int64."""
    return [torch.float16] + get_all_support_types()


#: The same list under a shorter name (this package's own).
get_all_support_types_withfp = get_all_support_types_withfp16


def get_profile_support_types() -> list[torch.dtype]:
    """float32, int32, int64, plus float64 where the hardware profile has it."""
    return _supported([torch.float32, torch.float64, torch.int32, torch.int64])


def get_profile_support_types_withfp16() -> list[torch.dtype]:
    """:func:`get_profile_support_types` plus float16 and, where the profile has
    it, bfloat16."""
    return _supported([torch.float16, torch.bfloat16]) + get_profile_support_types()


def get_float_types() -> list[torch.dtype]:
    """float32, float16, and bfloat16 where the profile has it."""
    return _supported([torch.float32, torch.float16, torch.bfloat16])


def get_all_types() -> list[torch.dtype]:
    """bool, integer and float dtypes the profile supports."""
    return _supported([torch.bool, torch.int8, torch.uint8, torch.float32, torch.int32,
                       torch.float64, torch.int64])


def get_raw_data() -> list[torch.Tensor]:
    """CPU float32 tensors of many ranks and layouts: contiguous, offset,
    strided, transposed, empty and channels-last."""
    return [
        torch.randn(10),
        torch.randn(10)[2:8],
        torch.randn(10)[1:9:2],
        torch.randn(10, 10),
        torch.randn(10, 0),
        torch.randn(10, 10).t(),
        torch.randn(10, 10, 2),
        torch.randn(10, 10, 2).transpose(0, 1),
        torch.randn(10, 10, 2, 2),
        torch.randn(10, 10, 2, 2, 1),
        torch.randn(10, 10, 2, 2, 1, 3),
        torch.randn(10, 10, 2, 2, 1, 3, 2),
        torch.randn(10, 10, 2, 2, 1, 3, 2, 2),
        torch.randn(10, 4, 2, 3).to(memory_format=torch.channels_last),
        torch.randn(10, 4, 1, 1).to(memory_format=torch.channels_last),
        torch.randn(10, 1, 3, 0).to(memory_format=torch.channels_last),
    ]

"""The module the real torch_musa keeps its test helpers in.

Tests written for it import from here (``from torch_musa.testing.base_test_tool
import DefaultComparator, skip_on_cpu_arch``, ``... import _HAS_TRITON``); the
helpers themselves live in this package's own modules and are the same
objects as ``torch_musa.testing.<name>``.
"""
from __future__ import annotations

import importlib.util
import platform

import pytest
import torch

from .comparators import (  # noqa: F401
    AbsDiffComparator,
    BooleanComparator,
    Comparator,
    DefaultComparator,
    QuantizedComparator,
    RelDiffComparator,
)
from .decorators import (  # noqa: F401
    MULTIGPU_AVAILABLE,
    MUSA_AVAILABLE,
    gen_ip_port,
    skip_if_musa_unavailable,
    skip_if_not_multiple_musa_device,
    test_on_nonzero_card_if_multiple_musa_device,
)
from .dtypes import (  # noqa: F401
    get_all_support_types,
    get_all_support_types_withfp16,
    get_all_types,
    get_float_types,
    get_musa_arch,
    get_raw_data,
)
from .op_test import InplaceOpChek, OpTest  # noqa: F401

#: Whether the ``triton`` package can be imported here.
_HAS_TRITON = importlib.util.find_spec("triton") is not None


def skip_on_cpu_arch(arch: str | list[str] | tuple[str, ...] = "aarch64", reason: str | None = None):
    """A pytest mark that skips a test on the named host CPU architecture(s)
    (``platform.machine()``, e.g. ``aarch64`` or ``x86_64``)."""
    arches = [arch] if isinstance(arch, str) else list(arch)
    current = platform.machine().lower()
    skip = any(a.lower() == current for a in arches)
    return pytest.mark.skipif(skip, reason=reason or f"Limited support on {current}")


def _complex_musa_to_cpu_adjust(musa_complex: torch.Tensor) -> torch.Tensor:
    """A complex musa tensor's CPU copy, moved as its real view."""
    return torch.view_as_complex(torch.view_as_real(musa_complex).to("cpu"))


def _complex_cpu_to_musa_adjust(cpu_complex: torch.Tensor, musa_device: str) -> torch.Tensor:
    """A complex CPU tensor's copy on ``musa_device``, moved as its real view."""
    return torch.view_as_complex(torch.view_as_real(cpu_complex).to(musa_device))

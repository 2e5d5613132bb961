"""Public helpers for testing operators on the musa device against a CPU reference.

    import torch
    from torch_musa import testing

    t = testing.OpTest(func=torch.add,
                       input_args={"input": torch.randn(4, 5), "other": torch.randn(5)},
                       comparators=testing.DefaultComparator(abs_diff=1e-6),
                       test_dtype=torch.float16)
    t.check_result()            # CPU copies vs musa copies, every output
    t.check_out_ops()           # out= writes the same values, in place
    t.check_grad_fn()           # same grad_fn kind, same input gradients
    t.check_inplace()           # Tensor.add_ on musa vs CPU vs functional
    t.check_musafp16_vs_musafp32()

A failing comparison raises AssertionError naming the op, the dtype, the result
(output, gradient, out= tensor, input modified in place), how many elements
differ, the worst one (index, both values, absolute and relative error) and the
tolerance. ``TOLERANCES`` is the package's one per-dtype tolerance policy. Dtype
lists keep the real torch_musa's meaning (``get_all_support_types()`` is
float32, int32, int64 everywhere); ``get_profile_support_types*`` follow the
hardware profile (``TORCH_MUSA_PROFILE``);
asking for a dtype the profile lacks raises ``UnsupportedDtypeError``.
"""
from .comparators import (
    AbsDiffComparator,
    BooleanComparator,
    Comparator,
    DefaultComparator,
    QuantizedComparator,
    RelDiffComparator,
    assert_allclose,
    assert_close,
)
from .base_test_tool import _complex_cpu_to_musa_adjust, _complex_musa_to_cpu_adjust
from .common_utils import assert_equal, cpu_and_musa, freeze_rng_state, get_cycles_per_ms, needs_musa
from .compile import CompileCounter
from .decorators import (
    MULTIGPU_AVAILABLE,
    MUSA_AVAILABLE,
    gen_ip_port,
    skip_if_musa_unavailable,
    skip_if_not_multiple_musa_device,
    test_on_nonzero_card_if_multiple_musa_device,
)
from .dtypes import (
    UnsupportedDtypeError,
    double_cast_active,
    dtype_supported,
    get_all_support_types,
    get_all_support_types_withfp,
    get_all_support_types_withfp16,
    get_all_types,
    get_float_types,
    get_musa_arch,
    get_profile_support_types,
    get_profile_support_types_withfp16,
    get_raw_data,
    require_dtype,
)
from .op_test import InplaceOpCheck, InplaceOpChek, OpTest
from .tolerances import TOLERANCES, tolerance

__all__ = [
    "OpTest", "InplaceOpChek", "InplaceOpCheck",
    "Comparator", "DefaultComparator", "BooleanComparator", "AbsDiffComparator",
    "RelDiffComparator", "QuantizedComparator",
    "assert_close", "assert_allclose",
    "get_raw_data", "get_all_support_types", "get_all_support_types_withfp",
    "get_all_support_types_withfp16", "get_profile_support_types",
    "get_profile_support_types_withfp16", "get_all_types", "get_float_types", "get_musa_arch",
    "dtype_supported", "require_dtype", "UnsupportedDtypeError", "TOLERANCES",
    "tolerance", "double_cast_active",
    "test_on_nonzero_card_if_multiple_musa_device", "skip_if_not_multiple_musa_device",
    "skip_if_musa_unavailable", "MULTIGPU_AVAILABLE", "MUSA_AVAILABLE", "gen_ip_port",
    "CompileCounter", "get_cycles_per_ms", "freeze_rng_state", "cpu_and_musa", "needs_musa",
    "assert_equal",
]

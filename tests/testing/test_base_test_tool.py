"""torch_musa.testing.base_test_tool: the module the real torch_musa keeps its test
helpers in, importable with the names its tests take from it."""
import platform

import pytest
import torch

from torch_musa import testing


def test_upstream_imports_work_and_are_the_package_helpers():
    from torch_musa.testing import base_test_tool as btt
    from torch_musa.testing.base_test_tool import (  # noqa: F401
        _HAS_TRITON, BooleanComparator, DefaultComparator, OpTest, skip_on_cpu_arch)

    assert isinstance(_HAS_TRITON, bool)
    for name in ("DefaultComparator", "BooleanComparator", "AbsDiffComparator",
                 "RelDiffComparator", "QuantizedComparator", "OpTest", "InplaceOpChek",
                 "get_raw_data", "get_all_support_types", "get_all_support_types_withfp16",
                 "get_float_types", "get_all_types", "skip_if_musa_unavailable",
                 "skip_if_not_multiple_musa_device", "MULTIGPU_AVAILABLE",
                 "test_on_nonzero_card_if_multiple_musa_device", "gen_ip_port"):
        assert getattr(btt, name) is getattr(testing, name), name
    assert btt.get_all_support_types() == [torch.float32, torch.int32, torch.int64]


def test_skip_on_cpu_arch_marks_only_this_machine():
    from torch_musa.testing.base_test_tool import skip_on_cpu_arch

    here = platform.machine()
    mark = skip_on_cpu_arch(here)
    assert mark.mark.args[0] is True and here.lower() in mark.kwargs["reason"]
    assert skip_on_cpu_arch("no-such-arch").mark.args[0] is False
    assert skip_on_cpu_arch().mark.args[0] is (here.lower() == "aarch64")


def test_complex_adjust_round_trips():
    from torch_musa.testing.base_test_tool import (
        _complex_cpu_to_musa_adjust, _complex_musa_to_cpu_adjust)

    x = torch.randn(3, 4, dtype=torch.complex64)
    m = _complex_cpu_to_musa_adjust(x, "musa")
    assert m.device.type == "musa" and m.dtype == torch.complex64
    back = _complex_musa_to_cpu_adjust(m)
    assert back.device.type == "cpu" and torch.equal(back, x)
    assert testing._complex_musa_to_cpu_adjust is _complex_musa_to_cpu_adjust

"""One tolerance policy: torch.testing's defaults (half-precision atol at one ulp of 1),
frozen, and what the sweeps, OpTest, musa-bench and CompareWithCPU hold results to."""
import pytest
import torch
from torch.testing._comparison import default_tolerances

from torch_musa.op_benchmark import runner
from torch_musa.testing import TOLERANCES, sweep_common, tolerance
from torch_musa.utils.compare_tool import compare_tensor

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def test_policy_is_torch_testing_with_half_precision_atol_at_one_ulp():
    for dtype in FLOATS + [torch.complex64, torch.complex128]:
        t = torch.zeros(1, dtype=dtype)
        rtol, atol = default_tolerances(t, t)
        assert tolerance(dtype)[0] == rtol, dtype
        if dtype not in (torch.float16, torch.bfloat16):
            assert tolerance(dtype)[1] == atol, dtype
    assert tolerance(torch.float16)[1] == 1e-3 and tolerance(torch.bfloat16)[1] == 1e-2
    assert tolerance(torch.int64) == tolerance(torch.bool) == (0.0, 0.0)
    with pytest.raises(TypeError):
        TOLERANCES[torch.float32] = (1.0, 1.0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_every_user_holds_results_to_the_policy(dtype):
    """Just inside the policy passes, twice outside fails, in each tool that compares."""
    rtol, atol = tolerance(dtype)
    ref = torch.full((4,), 3.0, dtype=torch.float64)
    inside = (ref + 0.5 * (atol + rtol * 3.0)).to(dtype)
    outside = (ref + 2.5 * (atol + rtol * 3.0)).to(dtype)
    ref = ref.to(dtype)
    for got, ok in ((inside, True), (outside, False)):
        assert runner.compare(ref, got)[0] is ok, ("musa-bench", dtype, ok)
        assert compare_tensor(got, ref, None, None)[0] is ok, ("CompareWithCPU", dtype, ok)
        if ok:
            sweep_common.compare(ref, got.to("musa"), dtype)
        else:
            with pytest.raises(AssertionError):
                sweep_common.compare(ref, got.to("musa"), dtype)

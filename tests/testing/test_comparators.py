"""Comparators and assert_close on their own."""
import math

import pytest
import torch

from torch_musa.testing import (AbsDiffComparator, BooleanComparator, Comparator,
                                DefaultComparator, QuantizedComparator, RelDiffComparator,
                                assert_allclose, assert_close)


def test_default_comparator_rule_and_tolerance():
    golden = torch.tensor([1.0, 100.0, 0.0])
    c = DefaultComparator(abs_diff=1e-3, rel_diff=1e-2)
    assert c(golden + torch.tensor([1e-3, 0.9, 0.0]), golden)
    assert not c(golden + torch.tensor([0.0, 1.1, 0.0]), golden)
    assert c.get_tolerance() == (1e-3, 1e-2, False)
    with pytest.raises(AssertionError) as info:
        c.check(golden + torch.tensor([0.0, 1.1, 0.0]), golden, op="myop", dtype=torch.float32)
    msg = str(info.value)
    assert "op myop" in msg and "dtype float32" in msg
    assert "worst at index (1,): musa=101.1 reference=100" in msg
    assert "atol=0.001 rtol=0.01" in msg and "allowed here 1.001" in msg


def test_worst_element_is_the_largest_excess():
    golden = torch.zeros(3, 3)
    result = golden.clone()
    result[0, 1] = 0.01
    result[2, 2] = 0.5
    msg = DefaultComparator().mismatch(result, golden)
    assert "2 of 9 elements differ" in msg and "worst at index (2, 2)" in msg


def test_shape_and_dtype_are_compared():
    c = DefaultComparator()
    assert not c(torch.zeros(2, 3), torch.zeros(3, 2))
    assert not c(torch.zeros(3), torch.zeros(3, dtype=torch.float64))
    assert "shape mismatch" in c.mismatch(torch.zeros(2, 3), torch.zeros(3, 2))
    assert "dtype mismatch" in c.mismatch(torch.zeros(3), torch.zeros(3).double())
    assert c.mismatch(torch.zeros(3), torch.zeros(3).double(), check_dtype=False) is None


def test_nan_and_inf():
    nan, inf = math.nan, math.inf
    a = torch.tensor([nan, inf, -inf, 1.0])
    assert DefaultComparator(equal_nan=True)(a, a.clone())
    assert not DefaultComparator(equal_nan=False)(a, a.clone())
    assert not DefaultComparator(equal_nan=True)(torch.tensor([inf]), torch.tensor([-inf]))
    assert not DefaultComparator(abs_diff=1e9)(torch.tensor([inf]), torch.tensor([1.0]))
    assert not AbsDiffComparator(1.0, equal_nan=True)(torch.tensor([nan]), torch.tensor([0.0]))
    assert RelDiffComparator(1e-3, equal_nan=True)(torch.tensor([nan]), torch.tensor([nan]))


def test_abs_rel_boolean():
    g = torch.tensor([0.0, 10.0])
    assert AbsDiffComparator(0.5)(g + 0.4, g) and not AbsDiffComparator(0.5)(g + 0.6, g)
    assert RelDiffComparator(0.1)(torch.tensor([0.0, 10.9]), g)
    assert not RelDiffComparator(0.1)(torch.tensor([1e-9, 10.0]), g)  # golden 0 needs 0
    b = torch.tensor([True, False])
    assert BooleanComparator()(b, b.clone())
    msg = BooleanComparator().mismatch(torch.tensor([True, True]), b)
    assert "worst at index (1,)" in msg and "exact equality" in msg
    assert BooleanComparator()(torch.arange(5), torch.arange(5))
    assert not BooleanComparator()(torch.arange(5), torch.arange(5) + (torch.arange(5) == 4))


def test_musa_and_cpu_tensors_and_empty():
    x = torch.randn(4, 4)
    assert DefaultComparator()(x.to("musa"), x)
    assert DefaultComparator()(torch.zeros(0, 3, device="musa"), torch.zeros(0, 3))
    # float64 stored on a profile without float64 compute still compares (on the CPU)
    d = torch.randn(3, dtype=torch.float64)
    assert DefaultComparator()(d.to("musa"), d)


def test_complex_values():
    z = torch.randn(3, dtype=torch.complex64)
    assert DefaultComparator()(z, z.clone())
    bad = z.clone()
    bad[1] += 1j
    msg = DefaultComparator().mismatch(bad, z)
    assert "worst at index (1, 1)" in msg and "real, imag" in msg


def test_widened_keeps_the_larger_tolerance():
    c = DefaultComparator(abs_diff=1e-7, rel_diff=1e-5)
    w = c.widened(1e-3, 2e-3)
    assert w.get_tolerance()[:2] == (1e-3, 2e-3) and c.get_tolerance()[:2] == (1e-7, 1e-5)
    assert DefaultComparator(abs_diff=1.0).widened(1e-3, 0)._atol == 1.0
    assert BooleanComparator().widened(1, 1).get_tolerance()[:2] == (0.0, 0.0)


def test_legacy_subclass_with_callable():
    class Within(Comparator):
        def __init__(self, bound):
            super().__init__()
            self._comparator = lambda r, g: bool((r - g).abs().max() < bound)

    assert Within(1.0)(torch.ones(3), torch.zeros(3) + 0.5)
    msg = Within(0.1).mismatch(torch.tensor([0.0, 0.5]), torch.zeros(2))
    assert "worst at index (1,)" in msg
    with pytest.raises(NotImplementedError):
        Comparator()(torch.ones(1), torch.ones(1))


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_quantized_comparator():
    x = torch.randn(4, 4)
    q = torch.quantize_per_tensor(x, 0.1, 3, torch.qint8)
    assert QuantizedComparator()(q, torch.quantize_per_tensor(x, 0.1, 3, torch.qint8))
    msg = QuantizedComparator().mismatch(q, torch.quantize_per_tensor(x, 0.1, 4, torch.qint8))
    assert "q_zero_point mismatch" in msg
    y = x.clone()
    y[0, 0] += 1.0
    msg = QuantizedComparator().mismatch(q, torch.quantize_per_tensor(y, 0.1, 3, torch.qint8))
    assert "int_repr mismatch" in msg and "worst at index (0, 0)" in msg
    scales, zps = torch.tensor([0.1, 0.2, 0.1, 0.1]), torch.zeros(4, dtype=torch.long)
    pc = torch.quantize_per_channel(x, scales, zps, 0, torch.qint8)
    c = QuantizedComparator(is_per_tensor=False)
    assert c(pc, torch.quantize_per_channel(x, scales, zps, 0, torch.qint8))
    msg = c.mismatch(pc, torch.quantize_per_channel(x, scales * 2, zps, 0, torch.qint8))
    assert "q_per_channel_scales mismatch" in msg


def test_assert_close():
    x = torch.randn(5, 5)
    assert_close(x.to("musa"), x.to("musa"))
    assert_close(x.to("musa"), x, check_device=False)
    with pytest.raises(AssertionError, match="device"):
        assert_close(x.to("musa"), x)
    bad = x.clone()
    bad[3, 1] += 1.0
    with pytest.raises(AssertionError) as info:
        assert_close(bad.to("musa"), x, check_device=False)
    msg = str(info.value)
    assert "Tensor-likes are not close" in msg
    assert "worst at index (3, 1)" in msg and "actual=" in msg and "expected=" in msg
    assert_close([x, {"k": x}], [x.clone(), {"k": x.clone()}])


def test_assert_allclose():
    x = torch.tensor([1.0, 2.0, float("nan")], device="musa")
    assert_allclose(x, [1.0, 2.0, float("nan")])
    assert_allclose(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))
    with pytest.raises(AssertionError):
        assert_allclose(x, [1.0, 2.5, float("nan")])


def test_comparison_is_chunked_and_finds_the_worst_across_chunks(monkeypatch):
    """Values are compared a chunk at a time (float64 temporaries stay chunk-sized);
    counts and the worst element come out as with one chunk."""
    a = torch.zeros(1000)
    b = a.clone()
    b[3], b[998] = 0.5, 2.0
    whole = DefaultComparator(abs_diff=0.1).mismatch(b, a)
    monkeypatch.setattr(Comparator, "_CHUNK", 64)
    seen = []
    original = Comparator._chunk_mismatch
    monkeypatch.setattr(Comparator, "_chunk_mismatch",
                        lambda self, x, y: seen.append(x.numel()) or original(self, x, y))
    chunked = DefaultComparator(abs_diff=0.1).mismatch(b, a)
    assert chunked == whole and "2 of 1000 elements differ" in chunked
    assert "index (998,)" in chunked and max(seen) == 64 and sum(seen) == 1000
    big = torch.zeros(3_000_000, dtype=torch.uint8)  # identical: no float64 at all
    seen.clear()
    assert BooleanComparator()(big, big.clone()) and seen == []

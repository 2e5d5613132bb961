"""A perturbed musa result must not pass, and the message must say where and why:
op, dtype, worst element index, both values, the error and the tolerance."""
import re

import pytest
import torch
import torch.nn.functional as F

from torch_musa import testing
from torch_musa.testing import (AbsDiffComparator, DefaultComparator, InplaceOpChek, OpTest,
                                RelDiffComparator)

from ._helpers import perturb_on_musa


def _fails(t: OpTest, *checks, **kw) -> str:
    with pytest.raises(AssertionError) as info:
        for check in checks or ("check_result",):
            getattr(t, check)(**kw)
    return str(info.value)


def _assert_report(msg, *, op, dtype, index, tol_words=("atol",)):
    assert re.search(rf"op (torch\.)?{op}\b", msg), msg
    assert f"dtype {dtype}" in msg, msg
    assert f"worst at index {index}" in msg, msg
    assert re.search(r"musa=\S+ cpu=\S+ abs error=\S+", msg), msg
    for w in tol_words:
        assert w in msg, msg


def test_binary_perturbed_fails():
    op = perturb_on_musa(torch.add, index=7, delta=1e-3)  # flat 7 in (3, 4) -> (1, 3)
    msg = _fails(OpTest(func=op, input_args={"input": torch.randn(3, 4),
                                             "other": torch.randn(3, 4)}))
    _assert_report(msg, op="add", dtype="float32", index="(1, 3)")
    assert "1 of 12 elements differ" in msg


@pytest.mark.parametrize("dtype", testing.get_float_types())
def test_unary_perturbed_fails_in_every_float_dtype(dtype):
    # a perturbation of 5% is beyond even bfloat16's tolerance
    op = perturb_on_musa(torch.exp, index=0, delta=0.05)
    msg = _fails(OpTest(func=op, input_args={"input": torch.zeros(5)}, test_dtype=dtype))
    _assert_report(msg, op="exp", dtype=str(dtype).split(".")[1], index="(0,)")
    assert re.search(r"musa=1\.0[45]\d* cpu=1 ", msg), msg


def test_reduction_perturbed_fails():
    op = perturb_on_musa(torch.sum, index=2, delta=1e-2)
    msg = _fails(OpTest(func=op, input_args={"input": torch.randn(4, 5), "dim": 1}))
    _assert_report(msg, op="sum", dtype="float32", index="(2,)")


def test_reduction_indices_perturbed_fails():
    op = perturb_on_musa(torch.max, index=1, delta=1, output=1)   # wrong argmax
    msg = _fails(OpTest(func=op, input_args={"input": torch.randn(4, 5), "dim": 1}))
    assert "output[1]" in msg and "worst at index (1,)" in msg, msg


def test_matmul_perturbed_fails():
    op = perturb_on_musa(torch.mm, index=5, delta=1e-3)
    msg = _fails(OpTest(func=op, input_args={"input": torch.randn(4, 8),
                                             "mat2": torch.randn(8, 3)},
                        comparators=DefaultComparator(abs_diff=1e-5, rel_diff=1e-5)))
    _assert_report(msg, op="mm", dtype="float32", index="(1, 2)")
    assert "atol=1e-05 rtol=1e-05" in msg


def test_conv_perturbed_fails():
    op = perturb_on_musa(F.conv2d, index=0, delta=1e-2)
    msg = _fails(OpTest(func=op, input_args={"input": torch.randn(1, 2, 5, 5),
                                             "weight": torch.randn(3, 2, 3, 3)}))
    _assert_report(msg, op="conv2d", dtype="float32", index="(0, 0, 0, 0)")


def test_perturbed_gradient_fails():
    def leaky_scale(input):
        out = input * 2
        if input.device.type == "musa":
            out = out + input.detach().sum() * 0 + (input * 1e-3)[0:1].sum()  # wrong grad at [0]
        return out

    x = torch.randn(6, requires_grad=True)
    msg = _fails(OpTest(func=leaky_scale, input_args={"input": x}), train=True)
    assert "grad of input 'input'" in msg or "output" in msg, msg


def test_perturbed_out_variant_fails():
    def mul(input, other, out=None):
        r = torch.mul(input, other, out=out)
        if out is not None and out.numel():
            out.view(-1)[0] += 1.0   # the out= path writes a wrong value
        return r

    t = OpTest(func=mul, input_args={"input": torch.ones(2, 2), "other": torch.ones(2, 2)})
    msg = _fails(t, "check_out_ops")
    assert "out= tensor 0 vs the functional result" in msg and "worst at index (0, 0)" in msg


def test_out_variant_that_reallocates_fails():
    def mul(input, other, out=None):
        if out is not None:
            out.set_(torch.mul(input, other))  # new storage: not in place
            return out
        return torch.mul(input, other)

    t = OpTest(func=mul, input_args={"input": torch.ones(3), "other": torch.ones(3)})
    assert "reallocated" in _fails(t, "check_out_ops")


def test_inplace_perturbed_fails(monkeypatch):
    def buggy_add_(self, other):
        self.add_(other)
        if self.device.type == "musa":
            self.view(-1)[3] -= 0.5
        return self

    monkeypatch.setattr(torch.Tensor, "buggy_add_", buggy_add_, raising=False)
    check = InplaceOpChek("buggy_add_", torch.zeros(2, 3), {"other": torch.ones(2, 3)})
    check.check_address()
    with pytest.raises(AssertionError) as info:
        check.check_res()
    msg = str(info.value)
    assert "Tensor.buggy_add_" in msg and "self after the call" in msg, msg
    assert "worst at index (1, 0): musa=0.5 cpu=1" in msg, msg


def test_inplace_that_reallocates_or_returns_other_fails(monkeypatch):
    def realloc_mul_(self, other):
        self.set_(self * other)
        return self

    def copy_mul_(self, other):
        return self * other

    monkeypatch.setattr(torch.Tensor, "realloc_mul_", realloc_mul_, raising=False)
    monkeypatch.setattr(torch.Tensor, "copy_mul_", copy_mul_, raising=False)
    with pytest.raises(AssertionError, match="self moved to new storage"):
        InplaceOpChek("realloc_mul_", torch.ones(3), {"other": torch.ones(3)}).check_address()
    # upstream's check_address compares addresses only; returning self is checked apart
    InplaceOpChek("copy_mul_", torch.ones(3), {"other": torch.ones(3)}).check_address()
    with pytest.raises(AssertionError, match="did not return self"):
        InplaceOpChek("copy_mul_", torch.ones(3), {"other": torch.ones(3)}).check_returns_self()


def test_inplace_on_one_device_only_fails():
    def sometimes_inplace(input):
        return input.relu_() if input.device.type == "musa" else input.relu()

    msg = _fails(OpTest(func=sometimes_inplace, input_args={"input": torch.randn(5)}))
    assert "musa modified" in msg and "cpu did not" in msg, msg


def test_shape_and_dtype_mismatch_fail():
    def wrong_shape(input):
        return input.sum(0, keepdim=input.device.type == "musa")

    def wrong_dtype(input):
        return input.double() if input.device.type == "musa" else input

    msg = _fails(OpTest(func=wrong_shape, input_args={"input": torch.randn(3, 4)}))
    assert "shape mismatch: musa (1, 4) vs cpu (4,)" in msg, msg
    msg = _fails(OpTest(func=wrong_dtype, input_args={"input": torch.randn(3)}))
    assert "dtype mismatch: musa float64 vs cpu float32" in msg, msg


def test_nan_where_cpu_has_number_fails():
    def nan_on_musa(input):
        out = input.clone()
        if out.device.type == "musa":
            out[1] = float("nan")
        return out

    msg = _fails(OpTest(func=nan_on_musa, input_args={"input": torch.ones(3)}))
    assert "worst at index (1,): musa=nan cpu=1" in msg, msg


def test_abs_and_rel_comparators_fail_with_their_rule():
    op = perturb_on_musa(torch.neg, index=2, delta=0.1)
    msg = _fails(OpTest(func=op, input_args={"input": torch.ones(4)},
                        comparators=AbsDiffComparator(abs_diff=0.01)))
    assert "abs_diff=0.01" in msg and "AbsDiffComparator failed" in msg, msg
    msg = _fails(OpTest(func=op, input_args={"input": torch.ones(4)},
                        comparators=RelDiffComparator(rel_diff=0.01)))
    assert "rel_diff=0.01" in msg and "rel error=0.1" in msg, msg


def test_low_precision_vs_fp32_perturbed_fails():
    def sigmoid(input):  # wrong only when computing in a low-precision dtype
        out = torch.sigmoid(input)
        if input.dtype in (torch.float16, torch.bfloat16):
            out = out.clone()
            out[1] += 0.05
        return out

    t = OpTest(func=sigmoid, input_args={"input": torch.zeros(4)})
    msg = _fails(t, "check_musafp16_vs_musafp32")
    assert "dtype float16" in msg and "musa float16=" in msg and "musa float32=" in msg, msg
    if torch.bfloat16 in testing.get_float_types():
        msg = _fails(t, "check_musabf16_vs_musafp32")
        assert "dtype bfloat16" in msg and "atol=0.01 rtol=0.016" in msg, msg


def test_inplace_variant_disagreeing_with_functional_fails(monkeypatch):
    def scale(input, factor):
        return input * factor

    def scale_(self, factor):  # in-place variant, wrong on musa only
        return self.mul_(factor + (0.5 if self.device.type == "musa" else 0.0))

    monkeypatch.setattr(torch.Tensor, "scale_", scale_, raising=False)
    t = OpTest(func=scale, input_args={"input": torch.ones(2, 3), "factor": 2.0})
    msg = _fails(t, "check_inplace")
    assert "Tensor.scale_" in msg and "musa=2.5 cpu=2" in msg, msg


def test_inplace_with_list_arguments_compares_on_the_host():
    """index_put_ takes a list of index tensors: compared element by element, with no
    cross-device comparison (as upstream's compare_list)."""
    idx = torch.tensor([0, 2])
    check = InplaceOpChek("index_put_", torch.zeros(4, 3),
                          {"indices": [idx], "values": torch.ones(3), "accumulate": True})
    check.check_address()
    check.check_res()


def test_grad_fn_kind_mismatch_fails():
    def other_formula(input):
        return input * 2 if input.device.type == "musa" else input + input

    msg = _fails(OpTest(func=other_formula, input_args={"input": torch.randn(4)}), "check_grad_fn")
    assert "MulBackward0" in msg and "AddBackward0" in msg, msg


def test_grad_fn_check_is_the_kind_only_as_upstream():
    """The same formula with other values passes check_grad_fn (values are check_result's)."""
    def scaled(input):
        return input * (2.0 if input.device.type == "musa" else 3.0)

    OpTest(func=scaled, input_args={"input": torch.randn(4)}).check_grad_fn()
    OpTest(func=torch.exp, input_args={"input": torch.randn(4)}).check_grad_fn(fp16=True)


def test_out_ops_skip_several_outputs_as_upstream():
    OpTest(func=torch.sort, input_args={"input": torch.randn(5)}).check_out_ops()

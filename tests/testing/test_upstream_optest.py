"""OpTest and InplaceOpChek take what the real torch_musa's tests give them
(torch_musa/testing/base_test_tool.py and tests/unittest/operator/ upstream)."""
import copy

import pytest
import torch
from torch.nn.utils import weight_norm

from torch_musa import testing
from torch_musa.testing import InplaceOpChek, OpTest


@pytest.mark.parametrize("value,out_int32", [(4.5, False), (25, True)])
def test_searchsorted_scalar_given_as_self_keyword(value, out_int32):
    # upstream's test_searchsort.py: the Scalar overload's first parameter is named self,
    # and upstream's OpTest calls func(**input_args)
    OpTest(func=torch.searchsorted,
           input_args={"sorted_sequence": torch.tensor([10, 20, 30, 40, 50]), "self": value,
                       "right": False, "out_int32": out_int32},
           comparators=testing.DefaultComparator()).check_result()


def test_self_still_positional_where_the_signature_has_no_self_keyword():
    OpTest(func=torch.add, input_args={"self": torch.randn(3), "other": torch.randn(3)}
           ).check_result()
    OpTest(func=torch.Tensor.mul, input_args={"self": torch.randn(3), "other": torch.randn(3)}
           ).check_result()


def test_check_address_does_not_demand_self_returned(monkeypatch):
    def flag_add_(self, other):  # in place, but answers something other than self
        self.add_(other)
        return True

    monkeypatch.setattr(torch.Tensor, "flag_add_", flag_add_, raising=False)
    check = InplaceOpChek("flag_add_", torch.zeros(4), {"other": torch.ones(4)})
    check.check_address()
    check.check_res()
    with pytest.raises(AssertionError, match="did not return self"):
        check.check_returns_self()


@pytest.mark.parametrize("rows", [4, 0])
def test_module_with_weight_norm_is_deep_copied(rows):
    # upstream's test_weight_norm.py::test_weight_norm_backward
    linear = torch.nn.Linear(20, 40)
    module_cpu = weight_norm(linear, name="weight")
    module_musa = weight_norm(copy.deepcopy(torch.nn.Linear(20, 40)), name="weight")
    module_musa.load_state_dict(module_cpu.state_dict())
    module_cpu(torch.randn(2, 20))  # weight is now a computed (non-leaf) attribute
    comparator = testing.DefaultComparator(abs_diff=5e-2, rel_diff=5e-3)
    OpTest(module_musa, module_cpu, input_args={"input": torch.randn(rows, 20)},
           comparators=comparator).check_result(train=True)
    OpTest(func=module_cpu, input_args={"input": torch.randn(rows, 20)}).check_result(train=True)
    assert module_cpu.weight_g.device.type == "cpu"  # the user's module is left alone


def test_direct_comparator_calls_promote_as_upstreams_rules():
    # upstream: Boolean is torch.all(torch.eq(...)), AbsDiff/RelDiff subtract: both promote
    ints, floats = torch.tensor([1, 2, 3]), torch.tensor([1.0, 2.0, 3.0])
    assert testing.BooleanComparator()(ints, floats)
    assert testing.BooleanComparator()(torch.tensor([True, False]), torch.tensor([1, 0]))
    assert testing.AbsDiffComparator()(floats.double(), floats)
    assert testing.RelDiffComparator()(floats.half(), floats)
    assert not testing.BooleanComparator()(ints, floats + 1)
    # upstream's DefaultComparator is torch.allclose, which refuses different dtypes
    assert not testing.DefaultComparator()(floats.double(), floats)


def test_optest_accepts_half_and_float_results_as_upstream():
    # upstream's compare_res turns float16/bfloat16 into float32 before comparing
    def half_on_musa(input):
        return input.half() if input.device.type == "musa" else input

    OpTest(func=half_on_musa, input_args={"input": torch.tensor([0.5, 1.0, 2.0])}
           ).check_result()
    OpTest(func=half_on_musa, input_args={"input": torch.tensor([0.5, 1.0, 2.0])}
           ).compare_res([torch.ones(2).bfloat16()], [torch.ones(2)])

    def double_on_musa(input):  # float64 vs float32 still differs upstream
        return input.double() if input.device.type == "musa" else input

    with pytest.raises(AssertionError, match="dtype mismatch"):
        OpTest(func=double_on_musa, input_args={"input": torch.ones(3)}).check_result()


def test_mkldnn_inputs_keep_their_layout_for_the_cpu_reference():
    # upstream's test_quantized_ops.py: the onednn reference takes the weight as mkldnn,
    # musa the same weight dense; OpTest copies each in its own layout
    w = torch.randint(-128, 128, (4, 3), dtype=torch.int8)
    test = OpTest(func=lambda qw: qw.float() * 2, refer_func=lambda qw: qw.to_dense().float() * 2,
                  input_args={})
    out_musa = test._call_func(inputs={"qw": w}, device="musa", refer=False)
    out_cpu = test._call_func(inputs={"qw": w.to_mkldnn()}, device="cpu", refer=True, onednn_flag=True)
    test.compare_res(out_musa, out_cpu)
    assert torch.equal(out_cpu[0], w.float() * 2)

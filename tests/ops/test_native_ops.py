"""Registry ops checked with the public testing helpers (torch_musa.testing):
musa against CPU copies, with gradients, out= and in-place variants, for each
dtype the hardware profile supports."""
import pytest
import torch

from torch_musa import testing

FLOATS = [d for d in testing.get_all_support_types() if d.is_floating_point]


def _args(dtype, **tensors):
    return {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in tensors.items()}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("func", [torch.add, torch.mul, torch.sub, torch.maximum, torch.atan2])
def test_binary(func, dtype):
    t = testing.OpTest(func=func, input_args=_args(dtype, input=torch.randn(4, 5), other=torch.randn(5)),
                       comparators=testing.DefaultComparator(abs_diff=1e-3, rel_diff=1e-3), test_dtype=dtype)
    t.check_result(train=dtype == torch.float32)
    t.check_out_ops()


@pytest.mark.parametrize("func", [torch.relu, torch.tanh, torch.exp, torch.sigmoid, torch.nn.functional.gelu])
def test_unary_with_gradients(func):
    t = testing.OpTest(func=func, input_args={"input": torch.randn(6, 7)},
                       comparators=testing.DefaultComparator(abs_diff=1e-6))
    t.check_result(train=True)
    t.check_grad_fn()


@pytest.mark.parametrize("func,kwargs", [(torch.sum, {"dim": 1}), (torch.mean, {"dim": 0}),
                                         (torch.amax, {"dim": 1}), (torch.argmax, {"dim": 1})])
def test_reductions(func, kwargs):
    t = testing.OpTest(func=func, input_args={"input": torch.randn(8, 9), **kwargs},
                       comparators=testing.DefaultComparator(abs_diff=1e-5))
    t.check_result()


def test_matmul_and_conv():
    testing.OpTest(func=torch.mm, input_args={"input": torch.randn(16, 8), "mat2": torch.randn(8, 4)},
                   comparators=testing.DefaultComparator(abs_diff=1e-5)).check_result(train=True)
    testing.OpTest(func=torch.nn.functional.conv2d,
                   input_args={"input": torch.randn(2, 3, 8, 8), "weight": torch.randn(4, 3, 3, 3),
                               "bias": torch.randn(4), "padding": 1},
                   comparators=testing.DefaultComparator(abs_diff=1e-4)).check_result(train=True)


@pytest.mark.parametrize("name", ["add", "mul", "clamp_min"])
def test_in_place_variants(name):
    other = {"add": {"other": torch.randn(3, 4)}, "mul": {"other": torch.randn(3, 4)},
             "clamp_min": {"min": 0.0}}[name]
    t = testing.OpTest(func=getattr(torch, name), input_args={"input": torch.randn(3, 4), **other},
                       comparators=testing.DefaultComparator(abs_diff=1e-6))
    t.check_inplace()


def test_a_perturbed_kernel_is_caught():
    lib = torch.library.Library("aten", "IMPL")

    def wrong_neg(x):
        return torch.ops.aten.neg.default(x.cpu()).add(1e-2).to(x.device)

    lib.impl("neg", wrong_neg, "PrivateUse1")
    try:
        with pytest.raises(AssertionError, match="neg"):
            testing.OpTest(func=torch.neg, input_args={"input": torch.randn(5)},
                           comparators=testing.DefaultComparator(abs_diff=1e-6)).check_result()
    finally:
        del lib

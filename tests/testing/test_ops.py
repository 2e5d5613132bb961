"""torch_musa.testing used on real ops: they pass on the musa device."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_musa import testing
from torch_musa.testing import (AbsDiffComparator, BooleanComparator, DefaultComparator,
                                InplaceOpCheck, InplaceOpChek, OpTest)

FLOATS = testing.get_float_types()


def _marked(dtypes, reason):
    """``FLOATS`` with ``reason``'s host-driver mark on the ``dtypes`` among them."""
    mark = pytest.mark.requires_host_driver(reason)
    return [pytest.param(d, marks=mark) if d in dtypes else d for d in FLOATS]


# ------------------------------------------------------------------ binary
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", [torch.add, torch.mul, torch.sub, torch.div, torch.maximum])
def test_binary_broadcast(op, dtype):
    t = OpTest(func=op, input_args={"input": torch.randn(4, 1, 5), "other": torch.randn(3, 5)},
               test_dtype=dtype)
    t.check_result()
    t.check_out_ops()
    # div's gradient wrt a broadcast divisor sums terms of mixed sign computed in the low
    # dtype: the cancellation exceeds a two-ulp tolerance, so it is checked in float32 only
    if op is not torch.maximum and (op is not torch.div or dtype == torch.float32):
        t.check_grad_fn()


@pytest.mark.parametrize("dtype", testing.get_all_support_types())
def test_binary_all_support_types(dtype):
    a = torch.randint(-5, 5, (6, 7)).to(dtype)
    b = torch.randint(1, 5, (6, 7)).to(dtype)
    OpTest(func=torch.mul, input_args={"input": a, "other": b}, test_dtype=dtype).check_result()
    OpTest(func=torch.lt, input_args={"input": a, "other": b},
           comparators=BooleanComparator()).check_result()


def test_binary_with_out_and_grad():
    a = torch.randn(5, 6, requires_grad=True)
    b = torch.randn(5, 6, requires_grad=True)
    OpTest(func=torch.mul, input_args={"input": a, "other": b}).check_result(train=True)
    OpTest(func=torch.mul, input_args={"input": a.detach(), "other": b.detach(),
                                       "out": torch.empty(5, 6)}).check_result(test_out=True)


# ------------------------------------------------------------------ unary
@pytest.mark.parametrize("op", [torch.exp, torch.sigmoid, torch.tanh, torch.relu, torch.abs,
                                torch.neg])
def test_unary_on_raw_data_layouts(op):
    for x in testing.get_raw_data():
        OpTest(func=op, input_args={"input": x}).check_result()


@pytest.mark.parametrize("op", [torch.sin, torch.sqrt, F.gelu, F.silu])
def test_unary_half_precision(op):
    x = torch.rand(8, 16) + 0.1
    t = OpTest(func=op, input_args={"input": x})
    t.check_result(train=False)
    t.check_musafp16_vs_musafp32()
    if torch.bfloat16 in FLOATS:
        t.check_musabf16_vs_musafp32()
        t.check_musabf16_vs_musafp16()


def test_unary_nan_inf_equal_nan():
    x = torch.tensor([0.0, -1.0, 1.0, float("inf"), float("-inf"), float("nan")])
    OpTest(func=torch.log, input_args={"input": x}).check_result()  # default equal_nan=True


# ------------------------------------------------------------------ reductions
@pytest.mark.parametrize("dtype", _marked((torch.float16, torch.bfloat16), "half-precision GPU prod against "
                                          "the CPU beyond the helper's host-tuned tolerance"))
def test_reductions(dtype):
    x = torch.randn(6, 7, 8)
    for func, kw in [(torch.sum, {"dim": 1}), (torch.mean, {"dim": (0, 2)}),
                     (torch.amax, {"dim": -1}), (torch.prod, {"dim": 0})]:
        t = OpTest(func=func, input_args={"input": x, **kw}, test_dtype=dtype,
                   comparators=DefaultComparator(abs_diff=1e-5, rel_diff=1e-5, equal_nan=True))
        t.check_result()
        t.check_out_ops()


def test_reduction_with_indices_and_values():
    x = torch.randn(5, 9)
    t = OpTest(func=torch.max, input_args={"input": x, "dim": 1})  # (values, indices)
    t.check_result()
    t.check_out_ops()
    OpTest(func=torch.argmax, input_args={"input": x, "dim": 0},
           comparators=BooleanComparator()).check_result()
    OpTest(func=torch.var_mean, input_args={"input": x, "dim": 1}).check_result()
    xg = x.clone().requires_grad_()
    OpTest(func=torch.sum, input_args={"input": xg}).check_result(train=True)


# ------------------------------------------------------------------ matmul
@pytest.mark.parametrize("dtype", _marked((torch.bfloat16,), "bfloat16 GPU matmul against the CPU beyond "
                                          "the helper's host-tuned tolerance"))
def test_matmul_family(dtype):
    comp = DefaultComparator(abs_diff=1e-4, rel_diff=1e-4)
    cases = [
        (torch.mm, {"input": torch.randn(8, 16), "mat2": torch.randn(16, 4)}),
        (torch.bmm, {"input": torch.randn(3, 8, 16), "mat2": torch.randn(3, 16, 4)}),
        (torch.matmul, {"input": torch.randn(2, 3, 8, 16), "other": torch.randn(16, 5)}),
        (torch.addmm, {"input": torch.randn(4), "mat1": torch.randn(8, 16),
                       "mat2": torch.randn(16, 4)}),
    ]
    for func, args in cases:
        t = OpTest(func=func, input_args=args, test_dtype=dtype, comparators=comp)
        t.check_result()
        t.check_out_ops()


def test_matmul_grads_and_fp16_vs_fp32():
    a = torch.randn(8, 16, requires_grad=True)
    b = torch.randn(16, 4, requires_grad=True)
    t = OpTest(func=torch.matmul, input_args={"input": a, "other": b},
               comparators=DefaultComparator(abs_diff=1e-5, rel_diff=1e-5))
    t.check_result(train=True)
    t.check_grad_fn()
    t.check_grad_fn(fp16=True)
    t.check_musafp16_vs_musafp32(train=True)


# ------------------------------------------------------------------ conv
def test_conv2d_functional():
    args = {"input": torch.randn(2, 3, 9, 9), "weight": torch.randn(4, 3, 3, 3),
            "bias": torch.randn(4), "stride": 2, "padding": 1}
    t = OpTest(func=F.conv2d, input_args=args,
               comparators=DefaultComparator(abs_diff=1e-5, rel_diff=1e-5))
    t.check_result()
    t.check_grad_fn()
    t.check_musafp16_vs_musafp32()


# Half precision: musa's convolutions accumulate in float32 as the card's do, the CPU's
# round partial sums, so they agree to an ulp of the result (2**-10 float16, 2**-7 bfloat16).
_CONV_TOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.mark.parametrize("dtype", FLOATS)
def test_conv2d_module_class(dtype):
    """func is an nn.Module class: built from input_args with the same seed on both
    devices, called with the inputs dict; weight gradients are compared too."""
    tol = _CONV_TOL[dtype]
    t = OpTest(func=nn.Conv2d, input_args={"in_channels": 3, "out_channels": 4,
                                           "kernel_size": 3, "padding": 1},
               test_dtype=dtype, comparators=DefaultComparator(abs_diff=tol, rel_diff=tol))
    t.check_result({"input": torch.randn(2, 3, 8, 8, requires_grad=True)}, train=True)


def test_module_instance_channels_last():
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
    x = torch.randn(2, 3, 10, 10).to(memory_format=torch.channels_last)
    t = OpTest(func=m, input_args={"input": x},
               comparators=DefaultComparator(abs_diff=1e-5, rel_diff=1e-5))
    t.check_result(train=True)
    t.check_grad_fn()   # module weights' gradients too
    t.check_out_ops()   # skipped: modules have no out= variant


# ------------------------------------------------------------------ containers
def test_tensors_inside_lists_and_dicts():
    tensors = [torch.randn(2, 3), torch.randn(4, 3), torch.randn(1, 3)]
    OpTest(func=torch.cat, input_args={"tensors": tensors, "dim": 0}).check_result()

    def dict_op(batch, scale):
        return {"sum": batch["x"] + batch["y"] * scale, "parts": [batch["x"].relu(), batch["y"]]}

    OpTest(func=dict_op, input_args={"batch": {"x": torch.randn(3), "y": torch.randn(3)},
                                     "scale": 2.0}).check_result()
    # inputs given positionally to check_result
    OpTest(func=torch.stack).check_result([[torch.randn(2), torch.randn(2)]])


# ------------------------------------------------------------------ in-place
@pytest.mark.parametrize("name,args", [
    ("add_", {"other": torch.randn(4, 5), "alpha": 2}),
    ("mul_", {"other": torch.randn(5)}),
    ("clamp_", {"min": -0.5, "max": 0.5}),
    ("exp_", {}),
    ("index_add_", {"dim": 0, "index": torch.tensor([0, 2]), "source": torch.randn(2, 5)}),
])
def test_inplace_ops(name, args):
    check = InplaceOpChek(name, torch.randn(4, 5), args)
    check.check_address()
    check.check_res()


def test_inplace_half_with_cpu_fp32():
    check = InplaceOpCheck("mul_", torch.randn(4, 5).half(),
                           {"other": torch.randn(4, 5).half()})
    check.check_address()
    check.check_res(cpu_to_fp32=True)


def test_inplace_via_optest_compares_mutated_input():
    OpTest(func=torch.Tensor.add_, input_args={"self": torch.randn(3, 4),
                                               "other": torch.randn(3, 4)}).check_result()
    t = OpTest(func=F.relu_, input_args={"input": torch.randn(10)})
    t.check_result()
    t.check_out_ops()   # skipped for in-place functions
    t.check_grad_fn()   # likewise


def test_abs_diff_comparator_on_op():
    OpTest(func=torch.softmax, input_args={"input": torch.randn(4, 10), "dim": 1},
           comparators=[AbsDiffComparator(1e-6), DefaultComparator()]).check_result()


@testing.test_on_nonzero_card_if_multiple_musa_device(1)
def test_runs_on_card_one_too():
    OpTest(func=torch.add, input_args={"input": torch.randn(3), "other": torch.randn(3)}
           ).check_result()


def test_python_number_outputs():
    def stats(input):
        return input.sum().item(), int(input.argmax()), input.shape

    OpTest(func=stats, input_args={"input": torch.randn(7)}).check_result()


@pytest.mark.parametrize("func,args", [
    (torch.add, {"input": torch.randn(3, 4), "other": torch.randn(4), "alpha": 0.5}),
    (torch.mul, {"input": torch.randn(3, 4), "other": 3.0}),
    (torch.clamp, {"input": torch.randn(10), "min": -0.1, "max": 0.2}),
    (torch.sigmoid, {"input": torch.randn(10)}),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_optest_check_inplace(func, args, dtype):
    OpTest(func=func, input_args=args, test_dtype=dtype).check_inplace()

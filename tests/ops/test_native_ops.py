"""Registry ops checked with the public testing helpers (torch_musa.testing):
musa against CPU copies, with gradients, out= and in-place variants, for each
dtype the hardware profile supports."""
import warnings

import pytest
import torch

from torch_musa import testing

FLOATS = [d for d in testing.get_profile_support_types() if d.is_floating_point]


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


def _backend_views_without_musa_kernel():
    """aten ops whose results alias an input and that have a CPU kernel but neither a
    composite nor a musa one: they would reach musa only through the CPU fallback."""
    from torch._C import _dispatch_has_kernel_for_dispatch_key as has

    missing = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        try:
            schemas = torch._C._jit_get_schemas_for_operator(name)
        except RuntimeError:
            continue
        for s in schemas:
            op = name + ("." + s.overload_name if s.overload_name else "")
            outs = [r for r in s.returns if isinstance(r.type, torch.TensorType)]
            if not outs or not all(r.alias_info is not None and not r.alias_info.is_write
                                   for r in outs):
                continue
            try:
                if has(op, "CPU") and not any(has(op, k) for k in (
                        "PrivateUse1", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                        "CompositeExplicitAutogradNonFunctional")):
                    missing.append(op)
            except RuntimeError:  # an overload the dispatcher does not know by that name
                pass
    return missing


def test_every_backend_view_has_a_musa_kernel():
    assert _backend_views_without_musa_kernel() == []


@pytest.mark.parametrize("base,view", [
    (torch.arange(6.0), lambda x: x.unfold(0, 2, 1)),
    (torch.arange(6.0).reshape(3, 2), torch.view_as_complex),
    (torch.randn(3, dtype=torch.complex64), torch.view_as_real),
])
def test_views_alias_and_match_the_cpu(base, view):
    m = base.to("musa")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: the views are the device's own
        got = view(m)
    assert got.data_ptr() == m.data_ptr()
    torch.testing.assert_close(got.cpu(), view(base))


def test_view_as_real_and_complex_share_memory():
    z = torch.randn(4, dtype=torch.complex64).to("musa")
    r = torch.view_as_real(z)
    c = torch.view_as_complex(r)
    assert r.data_ptr() == z.data_ptr() == c.data_ptr()
    r[0, 0] = 5.0
    assert z[0].real.item() == 5.0 and c[0].real.item() == 5.0
    u = r.reshape(-1).unfold(0, 2, 2)
    assert u.data_ptr() == z.data_ptr() and torch.equal(u.cpu(), r.cpu())


def test_pooled_aliases_carry_each_arguments_conj_and_neg_bits():
    """The aliases an op hands its kernel are pooled and re-pointed call after call; the
    conjugate and negative bits (dispatch keys, copied with the geometry) must be each
    argument's own, never a previous call's: conj, neg and plain arguments in turn."""
    def run(dev):
        g = torch.Generator().manual_seed(3)
        x, y = (torch.randn(4, 4, generator=g).to(dev) for _ in range(2))
        z = torch.complex(x, y)
        neg = z.conj().imag  # a real view with the negative bit
        out = []
        for _ in range(2):
            out.append(torch.mm(z.conj(), z))
            out.append(torch.mm(z, z))
            out.append(torch.mm(neg, x))
            out.append(torch.mm(x, neg))
            out.append(torch.mm(x, y))
            out.append(torch.addmm(z, z.conj(), z.conj()))
        return out

    import torch_musa

    exact = torch_musa._driver.KERNEL_DEVICE == "cpu"  # the CPU's own kernels
    got, want = run("musa"), run("cpu")
    for i, (g, w) in enumerate(zip(got, want)):
        assert not g.is_conj() and not g.is_neg()
        torch.testing.assert_close(g.cpu(), w, rtol=0 if exact else None, atol=0 if exact else None,
                                   msg=lambda m: f"call {i}: {m}")

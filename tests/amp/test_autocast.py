"""torch.autocast("musa") / torch.musa.amp.autocast: the CUDA per-op policy on AutocastPrivateUse1."""
import pytest
import torch
import torch.nn.functional as F

import torch_musa.amp
import torch_musa.attention
from torch_musa.amp import autocast_kernels

torch_musa.amp.register()
torch_musa.attention.register()

DEV = "musa"


def _t(*shape, dtype=torch.float32, requires_grad=False):
    return torch.randn(*shape, device=DEV).to(dtype).requires_grad_(requires_grad)


LOWER = {
    "mm": lambda a, w: torch.mm(a, w),
    "matmul": lambda a, w: a @ w,
    "linear": lambda a, w: F.linear(a, w),
    "bmm": lambda a, w: torch.bmm(a[None], w[None]),
    "baddbmm": lambda a, w: torch.baddbmm(a[None], a[None], w[None]),
    "addmm": lambda a, w: torch.addmm(a, a, w),
    "addmv": lambda a, w: torch.addmv(a[0], w, a[1]),
    "einsum": lambda a, w: torch.einsum("ij,jk->ik", a, w),
    "conv2d": lambda a, w: F.conv2d(a.view(1, 1, 8, 8), w.view(1, 1, 8, 8)[..., :3, :3]),
    "conv1d": lambda a, w: F.conv1d(a.view(1, 8, 8), w.view(8, 8, 1)),
    "sdpa": lambda a, w: F.scaled_dot_product_attention(a[None, None], w[None, None], w[None, None]),
}
FP32 = {
    "softmax": lambda h: torch.softmax(h, -1),
    "log_softmax": lambda h: F.log_softmax(h, -1),
    "exp": torch.exp,
    "log": lambda h: torch.log(h.abs() + 1),
    "pow": lambda h: torch.pow(h, 2),
    "layer_norm": lambda h: F.layer_norm(h, (8,)),
    "group_norm": lambda h: F.group_norm(h[None], 2),
    "mse_loss": lambda h: F.mse_loss(h, h * 2),
    "l1_loss": lambda h: F.l1_loss(h, h * 2),
    "cross_entropy": lambda h: F.cross_entropy(h, torch.zeros(8, dtype=torch.long, device=DEV)),
    "nll_loss": lambda h: F.nll_loss(h, torch.zeros(8, dtype=torch.long, device=DEV)),
    "bce_with_logits": lambda h: F.binary_cross_entropy_with_logits(h, h.sigmoid()),
    "sum": torch.sum,
    "cumsum": lambda h: torch.cumsum(h, 0),
    "norm": torch.norm,
    "logsumexp": lambda h: torch.logsumexp(h, 0),
    "rsqrt": lambda h: torch.rsqrt(h.abs() + 1),
    "cosine_similarity": lambda h: F.cosine_similarity(h, h + 1),
}


@pytest.mark.parametrize("name", sorted(LOWER))
def test_lower_precision_ops(name):
    a, w = _t(8, 8), _t(8, 8)
    with torch.autocast(DEV, dtype=torch.float16):
        out = LOWER[name](a, w)
    assert out.dtype == torch.float16
    ref = LOWER[name](a.half().float(), w.half().float())
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("name", sorted(FP32))
def test_float32_ops(name):
    h = _t(8, 8, dtype=torch.float16)
    with torch.autocast(DEV, dtype=torch.float16):
        out = FP32[name](h)
    assert out.dtype == torch.float32, name


def test_explicit_dtype_is_respected():
    h = _t(4, 8, dtype=torch.float16)
    with torch.autocast(DEV):
        assert torch.softmax(h, -1, dtype=torch.float16).dtype == torch.float16
        assert torch.softmax(h.float(), -1).dtype == torch.float32


def test_promote_ops():
    x, h = _t(4, 8), _t(4, 8, dtype=torch.float16)
    with torch.autocast(DEV):
        assert torch.cat([x, h]).dtype == torch.float32
        assert torch.stack([h, x]).dtype == torch.float32
        assert torch.cat([h, h]).dtype == torch.float16
        assert torch.addcmul(x, h, h).dtype == torch.float32
        assert torch.addcmul(h, h, h).dtype == torch.float16
        idx = torch.tensor([0, 1], device=DEV)
        assert torch.index_put(h, (idx,), x[:2]).dtype == torch.float32


def test_ops_outside_the_policy_keep_their_dtype():
    x, h = _t(4, 8), _t(4, 8, dtype=torch.float16)
    with torch.autocast(DEV):
        assert torch.relu(x).dtype == torch.float32
        assert torch.relu(h).dtype == torch.float16
        assert (x + h).dtype == torch.float32
        assert x.to(torch.float16).dtype == torch.float16


def test_cpu_tensors_are_not_cast():
    a = torch.randn(4, 4)
    with torch.autocast(DEV):
        assert torch.mm(a, a).dtype == torch.float32


def test_unsafe_binary_cross_entropy_raises():
    p = _t(4).sigmoid()
    with torch.autocast(DEV), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, p)


def test_nested_and_disabled_regions():
    a = _t(4, 4)
    with torch.musa.amp.autocast():
        assert torch.mm(a, a).dtype == torch.float16
        with torch.musa.amp.autocast(enabled=False):
            assert torch.mm(a, a).dtype == torch.float32
            with torch.autocast(DEV, dtype=torch.bfloat16):
                assert torch.mm(a, a).dtype == torch.bfloat16
            assert torch.mm(a, a).dtype == torch.float32
        assert torch.mm(a, a).dtype == torch.float16
    assert torch.mm(a, a).dtype == torch.float32
    assert not torch.is_autocast_enabled(DEV)


def test_defaults_and_module_attachment():
    import sys

    assert torch.musa.amp is torch_musa.amp
    assert sys.modules["torch.musa.amp"] is torch_musa.amp
    with torch.musa.amp.autocast() as ac:
        assert torch.get_autocast_dtype(DEV) == torch.float16
        assert torch.is_autocast_enabled(DEV)
    assert isinstance(ac, torch.amp.autocast)
    assert torch.float16 in torch.musa.get_amp_supported_dtype()
    ops = torch_musa.amp.registered_ops()
    assert ops["mm.default"] == "lower_precision" and ops["softmax.int"] == "fp32_set_opt_dtype"
    assert ops["addcmul.default"] == "promote" and ops["layer_norm.default"] == "fp32"
    assert ops["norm.Scalar"] == "fp32_append_dtype" and ops["binary_cross_entropy.default"] == "banned"
    # CUDA's lists, op for op, bar the cuDNN-only ops a CUDA build with cuDNN adds (its
    # convolutions, and _cudnn_rnn, which autocast wraps in cudnn/AutocastRNN.cpp): no
    # musa call reaches them (musa's recurrent layers never call _cudnn_rnn)
    cuda = {name if "." in name else name + ".default"
            for name in (op[len("aten::"):] for op in
                         torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA")
                         if op.startswith("aten::"))}
    assert set(ops) == cuda - {"cudnn_convolution.default", "cudnn_convolution_transpose.default",
                               "_cudnn_rnn.default"}


def test_autocast_as_decorator():
    @torch.musa.amp.autocast()
    def f(a):
        return a @ a

    assert f(_t(4, 4)).dtype == torch.float16


def test_backward_gives_float32_grads_and_cast_cache():
    lin = torch.nn.Linear(8, 8).to(DEV)
    x = _t(4, 8)

    def growth(cache_enabled):
        with torch.autocast(DEV, cache_enabled=cache_enabled):
            before = torch.musa.memory_allocated()
            out = lin(x)
            return torch.musa.memory_allocated() - before

    # the float16 copies of the float32 leaf weight and bias stay cached in the region
    assert growth(True) > growth(False)
    with torch.autocast(DEV):
        y = lin(x) + lin(x)
        loss = y.float().pow(2).mean()
    loss.backward()
    assert lin.weight.grad.dtype == torch.float32
    ref = torch.nn.Linear(8, 8).to(DEV)
    ref.load_state_dict(lin.state_dict())
    yr = F.linear(x.half(), ref.weight.half(), ref.bias.half()) * 2
    yr.float().pow(2).mean().backward()
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad, rtol=1e-2, atol=1e-3)


def test_cache_disabled_and_in_place_update_keeps_the_first_cast():
    w = _t(4, 4, requires_grad=True)
    x = _t(4, 4)
    with torch.autocast(DEV, cache_enabled=False):
        a = torch.mm(x, w)
        with torch.no_grad():
            w.mul_(2)
        b = torch.mm(x, w)  # no cache: the updated weight is cast again
        with torch.no_grad():
            w.div_(2)
    torch.testing.assert_close(b.float(), 2 * a.float(), rtol=1e-2, atol=1e-2)
    with torch.autocast(DEV):
        a = torch.mm(x, w)
        with torch.no_grad():
            w.mul_(2)
        b = torch.mm(x, w)  # as on the CPU and CUDA: the first cast is reused until the region exits
    assert torch.equal(b, a)
    with torch.autocast(DEV):
        c = torch.mm(x, w)  # a new region casts the updated weight
    torch.testing.assert_close(c.float(), 2 * a.float(), rtol=1e-2, atol=1e-2)


class _Fn(torch.autograd.Function):
    @staticmethod
    @torch.musa.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        ctx.inside = (a.dtype, torch.is_autocast_enabled(DEV), torch.mm(a, b).dtype)
        return torch.mm(a, b)

    @staticmethod
    @torch.musa.amp.custom_bwd
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ctx.bwd_autocast = torch.is_autocast_enabled(DEV)
        return g.mm(b.t()), a.t().mm(g)


class _Fn2(torch.autograd.Function):
    @staticmethod
    @torch.musa.amp.custom_fwd
    def forward(ctx, a):
        ctx.fwd_dtype = torch.mm(a, a).dtype
        return torch.mm(a, a)

    @staticmethod
    @torch.musa.amp.custom_bwd
    def backward(ctx, g):
        ctx.bwd_autocast = torch.is_autocast_enabled(DEV)
        return g


def test_custom_fwd_bwd():
    a = _t(4, 4, dtype=torch.float16, requires_grad=True)
    b = _t(4, 4, requires_grad=True)
    with torch.autocast(DEV):
        out = _Fn.apply(a, b)
    assert out.dtype == torch.float32
    assert out.grad_fn.inside == (torch.float32, False, torch.float32)
    out.sum().backward()
    assert a.grad.dtype == torch.float16 and b.grad.dtype == torch.float32
    c = _t(4, 4, requires_grad=True)
    with torch.autocast(DEV):
        out2 = _Fn2.apply(c)
    assert out2.grad_fn.fwd_dtype == torch.float16
    out2.float().sum().backward()
    assert out2.grad_fn.bwd_autocast is True


def test_bfloat16_on_s4000():
    a = _t(4, 4)
    with torch.musa.amp.autocast(dtype=torch.bfloat16):
        assert torch.mm(a, a).dtype == torch.bfloat16
        assert torch.softmax(a.bfloat16(), -1).dtype == torch.float32


def test_autocast_is_available_once_its_kernels_are_installed(monkeypatch):
    assert torch.musa.amp.is_autocast_available() and torch.amp.is_autocast_available("musa")
    assert torch_musa.amp.registered_ops()["mm.default"] == "lower_precision"
    monkeypatch.setattr(autocast_kernels, "_registered_ops", {})   # as before register()
    assert not torch.musa.amp.is_autocast_available()


@pytest.mark.slow
@pytest.mark.requires_host_driver(
    "selects the s80 profile, which only the host driver models; the GPU has bfloat16")
def test_bfloat16_is_refused_on_s80(subpython):
    r = subpython(
        """
        import warnings, torch, torch_musa, torch_musa.amp
        torch_musa.amp.register()
        try:
            torch.musa.amp.autocast(dtype=torch.bfloat16)
        except RuntimeError as e:
            print("ERR", e)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with torch.autocast("musa", dtype=torch.bfloat16):
                a = torch.randn(4, 4, device="musa")
                print("DTYPE", torch.mm(a, a).dtype)
        print("WARN", any("not supported" in str(x.message) for x in w))
        """,
        env={"TORCH_MUSA_PROFILE": "s80"},
    )
    assert r.returncode == 0, r.stderr
    assert "ERR musa autocast: bfloat16 is not supported by the hardware profile MTT S80" in r.stdout
    assert "DTYPE torch.float32" in r.stdout and "WARN True" in r.stdout

"""Strategies on real ops, device guards, custom ops, fallback visibility,
double casting and op debug logging."""
import copy
import warnings

import pytest
import torch

import torch_musa
import torch_musa.ops as musa_ops
from torch_musa._driver import KERNEL_DEVICE
from torch_musa.ops import op_debug, registry


def test_legacy_op_is_served_natively_and_matches_cpu():
    musa_ops.reset_fallback_stats()
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    out = torch.add(a.musa(), b.musa(), alpha=2)
    assert torch.equal(out.cpu(), torch.add(a, b, alpha=2))
    x = a.musa()
    x.add_(b.musa())
    assert torch.equal(x.cpu(), a + b)
    assert "aten::add.Tensor" not in musa_ops.fallback_stats()
    assert "aten::add_.Tensor" not in musa_ops.fallback_stats()


@pytest.mark.requires_host_driver("bit-identity with the CPU's atan2, whose kernel the host driver runs")
def test_legacy_meta_group_matches_cpu_and_checks_shapes():
    a, b = torch.randn(4, 5), torch.randn(5)
    assert torch.equal(torch.atan2(a.musa(), b.musa()).cpu(), torch.atan2(a, b))
    x = a.musa()
    r = x.atan2_(b.musa())
    assert r is x and torch.equal(x.cpu(), torch.atan2(a, b))
    out = torch.empty(0, device="musa")
    torch.atan2(a.musa(), b.musa(), out=out)
    assert torch.equal(out.cpu(), torch.atan2(a, b))
    with pytest.raises(RuntimeError):
        b.musa().atan2_(a.musa())  # in-place result cannot broadcast to self's shape


@pytest.mark.requires_host_driver("asserts the CPU kernels run")
def test_native_layer_and_group_norm_are_the_host_kernels():
    x = torch.randn(4, 32, 8, 8)
    w, b = torch.randn(32), torch.randn(32)
    torch.testing.assert_close(torch.nn.functional.group_norm(x.musa(), 8, w.musa(), b.musa()).cpu(),
                               torch.nn.functional.group_norm(x, 8, w, b), rtol=0, atol=0)
    y = torch.randn(16, 64)
    torch.testing.assert_close(torch.nn.functional.layer_norm(y.musa(), [64]).cpu(),
                               torch.nn.functional.layer_norm(y, [64]), rtol=0, atol=0)


@pytest.mark.requires_devices(2)
def test_device_guard_makes_the_ops_device_current():
    seen = []
    from torch_musa.ops import custom

    original = custom.rms_norm

    x = torch.randn(2, 8, device="musa:1")
    torch.musa.set_device(0)
    # the Customized kernel runs with the op's device current
    lib = torch.library.Library("musa", "IMPL")

    def spy(input, normalized_shape, weight=None, eps=1e-6):
        seen.append(torch.musa.current_device())
        return original(input, normalized_shape, weight, eps)

    lib.impl("rms_norm", registry._guarded(spy, True), "PrivateUse1", allow_override=True)
    try:
        torch.ops.musa.rms_norm(x, [8])
    finally:
        lib.impl("rms_norm", registry._guarded(original, True), "PrivateUse1", allow_override=True)
    assert seen == [1] and torch.musa.current_device() == 0


def test_rms_norm_custom_op_forward_backward_fake_and_compile():
    x = torch.randn(4, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    xm = x.detach().musa().requires_grad_()
    wm = w.detach().musa().requires_grad_()
    y = torch.ops.musa.rms_norm(xm, [16], wm, 1e-6)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(y.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    y.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(xm.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wm.grad.cpu(), w.grad, rtol=1e-4, atol=1e-5)
    torch.library.opcheck(torch.ops.musa.rms_norm.default, (torch.randn(3, 8, device="musa"), [8], None, 1e-6),
                          test_utils=("test_schema", "test_faketensor"))
    compiled = torch.compile(lambda t: torch.ops.musa.rms_norm(t, [16], None, 1e-6) * 2, backend="aot_eager")
    t = torch.randn(4, 16, device="musa")
    torch.testing.assert_close(compiled(t).cpu(), (torch.ops.musa.rms_norm(t, [16], None, 1e-6) * 2).cpu())


def test_fused_bias_gelu_custom_op():
    x = torch.randn(4, 8, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    xm, bm = (t.detach().musa().requires_grad_() for t in (x, b))
    y = torch.ops.musa.fused_bias_gelu(xm, bm, "tanh")
    ref = torch.nn.functional.gelu(x + b, approximate="tanh")
    torch.testing.assert_close(y.cpu(), ref.detach())
    y.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(bm.grad.cpu(), b.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xm.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)


# An op with kernels for the kernel devices (CPU, CUDA) and none for musa, outside the
# registry whatever it lists: musa serves it through the fallback, which covers every
# namespace.
OUTSIDE_OP = """
import torch
_lib = torch.library.Library("musa_test", "DEF")
_lib.define("outside_registry(Tensor x) -> Tensor")
for _key in ("CPU", "CUDA"):
    _lib.impl("outside_registry", lambda x: x * 2 + 1, _key)
"""
exec(OUTSIDE_OP)
outside_registry = torch.ops.musa_test.outside_registry


@pytest.mark.requires_profile("s80", reason="expects float64 missing from the profile's dtypes")
def test_fallback_warns_once_per_op_and_counts(subpython):
    # torch.ops calls do not turn C++ warnings into Python ones: the warning is read on stderr.
    r = subpython(OUTSIDE_OP + """
import torch_musa
x = torch.ones(2, device="musa")
for _ in range(3):
    torch.ops.musa_test.outside_registry(x)
""")
    assert r.returncode == 0, r.stderr
    msgs = [ln for ln in r.stderr.splitlines() if "musa_test::outside_registry is not in the musa operator registry" in ln]
    assert len(msgs) == 1 and "CPU fallback" in msgs[0]
    musa_ops.reset_fallback_stats()
    x = torch.randn(5, device="musa")
    assert torch.equal(outside_registry(x).cpu(), x.cpu() * 2 + 1)
    outside_registry(x)
    stats = musa_ops.fallback_stats()
    assert stats["musa_test::outside_registry"] == 2
    cov = musa_ops.coverage()
    assert "aten::add.Tensor" in cov["native"] and "musa_test::outside_registry" not in cov["native"]
    assert "float64" in cov["profile_refuses"]
    assert cov["fallback"]["musa_test::outside_registry"] == 2


def test_chosen_routes_are_counted_but_neither_warned_nor_refused(subpython):
    # The cuda driver routes the _foreach_* ops to CUDA's multi-tensor kernels through the
    # fallback on purpose (ops/fallback_routes.py): fused AdamW warned "not in the musa
    # operator registry" on every first step, and TORCH_MUSA_FALLBACK=error refused it.
    # aten::equal, an op the registry leaves to the fallback, stands in for them here.
    r = subpython(OUTSIDE_OP + """
import warnings
import torch_musa
import torch_musa.ops as musa_ops
from torch_musa import _C
from torch_musa.ops import registry
x = torch.arange(3.0, device="musa")
_C._register_fallback_ops(["equal"], chosen=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print("EQUAL", torch.equal(x, x), torch.equal(x, x + 1))
print("WARNED", [str(w.message) for w in caught])
registry.set_fallback_mode("error")
print("EQUAL", torch.equal(x, x))
try:
    torch.ops.musa_test.outside_registry(x)
except RuntimeError as e:
    print("REFUSED", "TORCH_MUSA_FALLBACK=error" in str(e))
print("COUNT", musa_ops.fallback_stats().get("aten::equal"))
""")
    assert r.returncode == 0, r.stderr
    assert "EQUAL True False" in r.stdout and "WARNED []" in r.stdout
    assert "EQUAL True" in r.stdout.split("WARNED")[1] and "REFUSED True" in r.stdout
    assert "COUNT 3" in r.stdout and "equal is not in the musa operator registry" not in r.stderr


def test_coverage_says_what_the_profile_refuses_and_for_which_ops():
    cov = musa_ops.coverage()
    assert cov["profile"] == torch.musa.get_device_name() and cov["driver"] == torch_musa._C._driver_name()
    assert "aten::copy_" in cov["dtype_agnostic"] and "aten::add" not in cov["dtype_agnostic"]
    for name in cov["profile_refuses"]:
        x = torch.ones(2, dtype=getattr(torch, name), device="musa")   # a factory: any dtype
        with pytest.raises(RuntimeError, match="not supported by the musa hardware profile"):
            x + x
        assert torch.equal((x == x).cpu(), torch.ones(2, dtype=torch.bool))   # aten::eq is agnostic
    for name in ("float32", "float16", "int64", "bool"):
        assert name not in cov["profile_refuses"]


@pytest.mark.slow
def test_fallback_error_mode(subpython):
    r = subpython(OUTSIDE_OP + """
import torch_musa
print(torch.add(torch.ones(2, device="musa"), 1).sum().item())  # native: fine
try:
    torch.ops.musa_test.outside_registry(torch.ones(2, device="musa"))
except RuntimeError as e:
    print("ERR", e)
""", {"TORCH_MUSA_FALLBACK": "error"})
    assert r.returncode == 0, r.stderr
    assert "4.0" in r.stdout and "ERR musa_test::outside_registry" in r.stdout and "TORCH_MUSA_FALLBACK=error" in r.stdout


@pytest.mark.slow
@pytest.mark.requires_profile("s4000", reason="expects the S4000 profile name in the report")
def test_coverage_cli_json(subpython):
    r = subpython("import sys; from torch_musa.ops.__main__ import main; sys.exit(main(['--json', '-']))")
    assert r.returncode == 0, r.stderr
    import json

    data = json.loads(r.stdout[r.stdout.index("{"):])
    assert data["profile"] == "MTT S4000" and len(data["native"]) > 250


@pytest.mark.requires_profile("s80", reason="double casting is for cards without float64")
def test_double_cast_computes_in_float32_and_keeps_float64():
    x = torch.randn(6, 6, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="TORCH_USE_MUSA_DOUBLE_CAST"):
        x.musa() @ x.musa()
    registry.set_double_cast(True)
    try:
        xm = x.musa()
        y = xm @ xm
        assert y.dtype == torch.float64 and y.device.type == "musa"
        torch.testing.assert_close(y.cpu(), (x.float() @ x.float()).double())
        xm.mul_(2)  # in-place writes float64 back
        assert xm.dtype == torch.float64 and torch.equal(xm.cpu(), (x.float() * 2).double())
        assert torch.equal((xm > 0).cpu(), (x > 0))  # comparisons skip the cast
        assert outside_registry(xm).dtype == torch.float64  # through the fallback too
    finally:
        registry.set_double_cast(None)  # back to following TORCH_USE_MUSA_DOUBLE_CAST


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_double_cast_training_with_double_models(subpython, kind):
    r = subpython(f"""
        import torch, torch_musa
        from torch_musa.testing.models import MODELS, make_batches
        torch.manual_seed(0)
        model = MODELS["{kind}"]().double().musa().eval()
        x, y = next(make_batches("{kind}", 1))
        x = x.double().musa() if x.is_floating_point() else x.musa()
        loss = torch.nn.functional.cross_entropy(model(x), y.musa())
        loss.backward()
        print(loss.dtype, model.head[-1].weight.grad.dtype if hasattr(model.head, "__getitem__") else model.head.weight.grad.dtype)
        ref = MODELS["{kind}"]().double().eval()
        ref.load_state_dict({{k: v.cpu() for k, v in model.state_dict().items()}})
        rl = torch.nn.functional.cross_entropy(ref(x.cpu()), y)
        print(abs(rl.item() - loss.item()) < 1e-4)
    """, {"TORCH_USE_MUSA_DOUBLE_CAST": "TRUE"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["torch.float64", "torch.float64", "True"]


def test_op_debug_levels_and_filters(tmp_path):
    op_debug.enable(5, out_dir=tmp_path, length=3, allow=["ADD"])
    try:
        x = torch.arange(10.0, device="musa")
        x + x
        x * 2  # filtered out
    finally:
        op_debug.disable()
    text = (tmp_path / "full_log.txt").read_text()
    assert "aten::add.Tensor" in text and "aten::mul" not in text
    assert "(10,) float32 musa:0" in text and "min=0 max=18" in text and "values=[0.0, 2.0, 4.0] ..." in text
    folders = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    assert folders == ["000001_aten.add.Tensor"]
    with pytest.raises(ValueError, match="cannot be used together"):
        op_debug.OpDebugLogger(1, out_dir=tmp_path, allow=["a"], deny=["b"])


@pytest.mark.slow
def test_op_debug_from_environment(subpython, tmp_path):
    r = subpython("""
        import torch, torch_musa
        x = torch.ones(3, device="musa")
        (x + x).relu()
    """, {"TORCH_MUSA_OP_DEBUG": "1", "TORCH_MUSA_OP_DEBUG_DIR": str(tmp_path),
          "TORCH_MUSA_OP_DEBUG_BLACK_LIST": "relu"})
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "full_log.txt").read_text()
    assert "aten::add.Tensor" in text and "relu" not in text and "min=" not in text


@pytest.mark.parametrize("mode,dims", [("nearest", 1), ("nearest", 2), ("nearest", 3), ("nearest-exact", 1),
                                       ("nearest-exact", 2), ("nearest-exact", 3), ("linear", 1),
                                       ("bilinear", 2), ("bicubic", 2), ("trilinear", 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_interpolate_forward_and_backward_are_native_and_match_cpu(mode, dims, dtype):
    # A U-Net's or a segmentation head's upsampling: forward and backward served by the
    # registry (the backward took the boxed fallback, and warned, until it was listed).
    musa_ops.reset_fallback_stats()
    x = torch.randn(2, 3, *[5] * dims).to(dtype)
    kw = {} if mode.startswith("nearest") else {"align_corners": False}
    got = {}
    for dev in ("cpu", "musa"):
        leaf = x.clone().to(dev).requires_grad_()
        y = torch.nn.functional.interpolate(leaf, scale_factor=2.5 if dims < 3 else 1.6, mode=mode, **kw)
        y.backward((torch.arange(y.numel(), device=dev).reshape(y.shape) / y.numel()).to(dtype))
        got[dev] = (y.detach().cpu(), leaf.grad.cpu())
    # Bit for bit where the CPU's kernels run; CUDA's backward adds bfloat16 atomically, rounding
    # at each of up to 16 adds per element (bicubic): a few bfloat16 ulps.
    tol = ({"rtol": 0, "atol": 0} if KERNEL_DEVICE == "cpu"
           else {"rtol": 8e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {})
    for a, b in zip(got["musa"], got["cpu"]):
        torch.testing.assert_close(a, b, **tol)
    assert not [op for op in musa_ops.fallback_stats() if "upsample" in op], musa_ops.fallback_stats()


def test_common_nn_modules_train_without_the_fallback():
    # What a module_db sweep found taking the boxed fallback: segmentation losses
    # (CrossEntropyLoss on N,C,H,W is nll_loss2d), the reflect/replicate pads of
    # image models, GLU, PReLU, LogSigmoid, the robust losses' backwards, 3-D pools.
    nn = torch.nn
    cases = [
        (nn.CrossEntropyLoss(), lambda: (torch.randn(2, 5, 4, 4), torch.randint(0, 5, (2, 4, 4)))),
        (nn.ReflectionPad2d(2), lambda: (torch.randn(2, 3, 5, 5),)),
        (nn.ReplicationPad3d(1), lambda: (torch.randn(1, 2, 3, 3, 3),)),
        (nn.GLU(), lambda: (torch.randn(4, 6),)),
        (nn.PReLU(3), lambda: (torch.randn(2, 3, 4),)),
        (nn.LogSigmoid(), lambda: (torch.randn(7),)),
        (nn.HuberLoss(delta=0.5), lambda: (torch.randn(6), torch.randn(6))),
        (nn.SmoothL1Loss(), lambda: (torch.randn(6), torch.randn(6))),
        (nn.L1Loss(), lambda: (torch.randn(6), torch.randn(6))),
        (nn.Hardshrink(), lambda: (torch.randn(6),)),
        (nn.Softshrink(), lambda: (torch.randn(6),)),
        (nn.Threshold(0.1, 20.0), lambda: (torch.randn(6),)),
        (nn.AdaptiveMaxPool2d(2), lambda: (torch.randn(1, 2, 5, 5),)),
        (nn.MaxPool3d(2), lambda: (torch.randn(1, 2, 4, 4, 4),)),
        (nn.AdaptiveAvgPool3d(2), lambda: (torch.randn(1, 2, 5, 5, 5),)),
        (nn.KLDivLoss(reduction="batchmean"), lambda: (torch.randn(3, 4).log_softmax(-1), torch.rand(3, 4))),
    ]
    musa_ops.reset_fallback_stats()
    for module, make in cases:
        torch.manual_seed(0)
        args = make()
        got = {}
        for dev in ("cpu", "musa"):
            m = copy.deepcopy(module).to(dev)
            xs = [a.clone().to(dev).requires_grad_(a.is_floating_point()) for a in args]
            y = m(*xs)
            y.float().pow(2).sum().backward()
            got[dev] = [y.detach().cpu()] + [x.grad.cpu() for x in xs if x.requires_grad]
            got[dev] += [p.grad.cpu() for p in m.parameters()]
        exact = {"rtol": 0, "atol": 0} if KERNEL_DEVICE == "cpu" else {}  # bit for bit on the CPU's kernels
        for a, b in zip(got["musa"], got["cpu"]):
            torch.testing.assert_close(a, b, **exact, msg=lambda m: f"{type(module).__name__}: {m}")
    assert musa_ops.fallback_stats() == {}


def _fft_and_complex(t):
    z = torch.fft.rfft(t, dim=-1)
    return [z, torch.fft.irfft(z, n=t.shape[-1]), torch.fft.fft(z), torch.fft.ifftn(z), torch.fft.fftshift(z),
            torch.polar(t.abs(), t), torch.complex(t, t.flip(-1)), torch.angle(z)]


def _sampling(t):
    torch.manual_seed(3)
    p = t.softmax(-1)
    return [torch.multinomial(p, 3, replacement=True), torch.multinomial(p, 2),
            torch.empty_like(t).exponential_(), torch.empty_like(t).log_normal_(), torch.empty_like(t).cauchy_()]


def _vision(t):
    img = t.reshape(1, 4, 4, 4)
    grid = torch.tanh(t[:18].reshape(1, 3, 3, 2))
    pooled, idx = torch.nn.functional.max_pool2d(img, 2, return_indices=True)
    return [torch.nn.functional.pixel_shuffle(img, 2), torch.nn.functional.pixel_unshuffle(img, 2),
            torch.nn.functional.grid_sample(img, grid, align_corners=False),
            torch.nn.functional.unfold(img, 2), torch.nn.functional.fold(img.reshape(1, 16, 4), (3, 3), 2),
            torch.nn.functional.max_unpool2d(pooled, idx, 2), torch.channel_shuffle(img, 2)]


def _special(t):
    return [torch.lgamma(t), torch.digamma(t), torch.erfinv(t.tanh()), torch.logaddexp(t, t.flip(0)),
            torch.nan_to_num(t.log()), torch.rsub(t, t.flip(0)), torch.logit(t.sigmoid()), torch.sinc(t),
            torch.hypot(t, t.flip(0)), torch.special.i0(t), torch.erfc(t), torch.frac(t), torch.copysign(t, -t)]


def _selection(t):
    i = (t * 3).long().abs()
    return [*torch.median(t.reshape(4, -1), 1), *torch.kthvalue(t, 3), *torch.mode(i), torch.bincount(i),
            torch.isin(i, i[:3]), torch.bucketize(t, t.sort().values), torch.searchsorted(t.sort().values, t),
            *torch.cummax(t, 0), torch.logcumsumexp(t, 0), torch.tril_indices(4, 3, device=t.device),
            torch.nansum(t), torch.count_nonzero(i), torch.take(t, i % t.numel()), torch.trace(t.reshape(8, -1))]


def _training(t):
    # embedding_bag and cdist, with their backward
    w = t[:40].reshape(10, 4).detach().clone().requires_grad_()
    bag = torch.nn.functional.embedding_bag(torch.tensor([1, 2, 4, 5, 4, 3], device=t.device), w,
                                            torch.tensor([0, 3], device=t.device), mode="mean")
    x = t[:12].reshape(3, 4).detach().clone().requires_grad_()
    d = torch.cdist(x, t[20:40].reshape(5, 4))
    (bag.sum() + d.sum()).backward()
    return [bag, d, w.grad, x.grad]


def _distributions(t):
    # torch.distributions' samplers and their reparameterised gradients
    torch.manual_seed(4)
    conc = (t[:8] * 3).detach().clone().requires_grad_()
    gamma = torch.distributions.Gamma(conc, torch.ones_like(conc)).rsample()
    dirichlet = torch.distributions.Dirichlet(conc.reshape(2, 4)).rsample()
    (gamma.sum() + (dirichlet * t[8:16].reshape(2, 4)).sum()).backward()
    return [gamma, dirichlet, conc.grad, torch.poisson(t * 4), torch.binomial(torch.full_like(t, 10.0), t / 2),
            torch.repeat_interleave((t[:6] * 3).long()), *torch.unique((t[:12] * 2).round().reshape(4, 3), dim=0,
                                                                      return_inverse=True, return_counts=True)]


def _inference_layers(t):
    # nn.TransformerEncoderLayer's and nn.MultiheadAttention's inference fast paths, weight
    # norm (wav2vec2's positional convolution), Embedding(max_norm), EmbeddingBag without grad
    torch.manual_seed(5)
    dev = t.device
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).to(dev).eval()
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).to(dev).eval()
    x = t[:48].reshape(2, 3, 8)
    with torch.no_grad():
        enc = layer(x)
        att, _ = mha(x, x, x, need_weights=False)
        # (the fast path needs query, key and value to be one tensor: x, not three x.to() copies)
        pad = torch.tensor([[False] * 3, [False, True, True]], device=dev)
        padded, weights = mha(x, x, x, key_padding_mask=pad)
        bag = torch.nn.functional.embedding_bag(torch.tensor([0, 2, 1, 3], device=dev), t[:16].reshape(4, 4),
                                                torch.tensor([0, 2], device=dev))
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(2, 2, 3)).to(dev)
    y = conv(t[:12].reshape(1, 2, 6))
    y.sum().backward()
    emb = torch.nn.Embedding(5, 3, max_norm=0.5).to(dev)
    looked = emb(torch.tensor([1, 3, 1], device=dev))
    weight_norm = conv.parametrizations.weight
    return [enc, att, padded, weights, bag, y, weight_norm.original0.grad, weight_norm.original1.grad,
            looked, emb.weight.detach()]


def _training_extras(t):
    # fused Adagrad, forward-mode GLU, eigenvalues, matrix exponential, batch norm's
    # export-time ops
    ps = [t[:6].reshape(2, 3).clone().requires_grad_(), t[6:10].clone().requires_grad_()]
    opt = torch.optim.Adagrad(ps, lr=0.1, fused=True)
    for _ in range(2):
        (ps[0].square().sum() + ps[1].sin().sum()).backward()
        opt.step()
    _, glu_t = torch.func.jvp(lambda a: torch.nn.functional.glu(a, -1), (t[:8].reshape(2, 4),), (t[8:16].reshape(2, 4),))
    m = t[:9].reshape(3, 3)
    x = t[:24].reshape(2, 3, 4)
    mean, var = torch.zeros(3, device=t.device), torch.ones(3, device=t.device)
    bn = torch.ops.aten._native_batch_norm_legit(x, None, None, mean, var, True, 0.1, 1e-5)
    upd = torch.ops.aten._batch_norm_with_update(x, t[:3], t[3:6], mean, var, 0.1, 1e-5)
    pooled = torch.empty(2, 2, 2, device=t.device)
    torch._C._nn.adaptive_avg_pool2d(x, (2, 2), out=pooled)
    return [*ps, glu_t, torch.linalg.eigvals(m), torch.linalg.matrix_exp(m), *bn, *upd[:3], mean, var, pooled]


@pytest.mark.requires_host_driver("bit-identity with the CPU's kernels and random numbers, which the host driver has")
@pytest.mark.parametrize("family", [_fft_and_complex, _sampling, _vision, _special, _selection, _training,
                                    _distributions, _inference_layers, _training_extras])
def test_ops_once_in_the_fallback_are_native_and_match_cpu(family):
    # FFT, sampling, vision and special-function ops that went through the boxed
    # fallback until the OpInfo sweep's fallback count listed them: served natively, the
    # same results as the CPU device's, bit for bit.
    musa_ops.reset_fallback_stats()
    torch.manual_seed(0)
    t = torch.rand(64) + 0.05
    got = {dev: family(t.to(dev)) for dev in ("cpu", "musa")}
    for i, (a, b) in enumerate(zip(got["cpu"], got["musa"])):
        assert b.device.type == "musa", (family.__name__, i)
        assert torch.equal(a, b.cpu()), (family.__name__, i)
    assert musa_ops.fallback_stats() == {}

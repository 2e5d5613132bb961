"""float16/bfloat16 for ops CUDA has in half precision and the CPU's kernels lack
(issue 23, item 7): computed in float32 on the host, returned in the requested dtype."""
import fnmatch
import warnings

import pytest
import torch
import torch.nn.functional as F

from torch_musa.ops import half_upcast
from torch_musa.testing import dtype_supported
from torch_musa.testing.sweep_common import load_testing_db

HALF = [d for d in (torch.float16, torch.bfloat16) if dtype_supported(d)]
HOST = pytest.mark.requires_host_driver("bit for bit against the CPU's float32 kernels; CUDA's are "
                                        "other kernels (and its ctc_loss has no float16)")


def _ctc_inputs():
    torch.manual_seed(0)
    T, C, N, S = 30, 6, 4, 10
    lp = torch.randn(T, N, C).log_softmax(2)
    return lp, torch.randint(1, C, (N, S)), torch.full((N,), T), torch.randint(3, S, (N,))


@HOST
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_in_half_precision(dtype, reduction):
    lp, tg, il, tl = _ctc_inputs()
    with pytest.raises(NotImplementedError, match="not implemented for"):
        F.ctc_loss(lp.to(dtype), tg, il, tl, reduction=reduction)  # the CPU device cannot
    x = lp.to(dtype).musa().requires_grad_()
    loss = F.ctc_loss(x, tg.musa(), il.musa(), tl.musa(), reduction=reduction)
    loss.sum().backward()
    ref_in = lp.to(dtype).float().requires_grad_()
    ref = F.ctc_loss(ref_in, tg, il, tl, reduction=reduction)
    ref.sum().backward()
    assert loss.dtype == dtype and x.grad.dtype == dtype
    # float32 work rounded once: equal to the float32 result rounded to the dtype
    assert torch.equal(loss.detach().cpu(), ref.detach().to(dtype))
    assert torch.equal(x.grad.cpu(), ref_in.grad.to(dtype))


@HOST
def test_ctc_loss_float32_unchanged():
    lp, tg, il, tl = _ctc_inputs()
    x = lp.musa().requires_grad_()
    loss = F.ctc_loss(x, tg.musa(), il.musa(), tl.musa())
    loss.backward()
    ref_in = lp.clone().requires_grad_()
    ref = F.ctc_loss(ref_in, tg, il, tl)
    ref.backward()
    assert torch.equal(loss.detach().cpu(), ref.detach()) and torch.equal(x.grad.cpu(), ref_in.grad)


SAMPLES = {
    "avg_pool3d": lambda x: F.avg_pool3d(x, 2),
    "upsample_aa": lambda x: F.interpolate(x[:, :, 0], scale_factor=0.5, mode="bilinear", antialias=True),
    "multi_margin_loss": lambda x: F.multi_margin_loss(x.flatten(1), torch.arange(2, device=x.device)),
    "multilabel_margin_loss": lambda x: F.multilabel_margin_loss(
        x.flatten(1)[:, :5], torch.tensor([[0, 3, -1, 0, 0], [4, -1, 0, 0, 0]], device=x.device)),
}


# On the H200 CUDA's avg_pool3d (both dtypes) and bfloat16 multilabel_margin_loss matched
# the CPU's float32 kernels rounded once, bit for bit; the other pairs did not.
SAME_ON_CUDA = {("avg_pool3d", torch.float16), ("avg_pool3d", torch.bfloat16),
                ("multilabel_margin_loss", torch.bfloat16)}


@pytest.mark.parametrize("name, dtype", [
    pytest.param(name, d, id=f"{name}-dtype{i}", marks=() if (name, d) in SAME_ON_CUDA else HOST)
    for name in SAMPLES for i, d in enumerate(HALF)])
def test_ops_without_cpu_half_kernels(name, dtype):
    f = SAMPLES[name]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 6, 6).to(dtype)
    xm = x.musa().requires_grad_()
    y = f(xm)
    y.sum().backward()
    xr = x.float().requires_grad_()
    r = f(xr)
    r.sum().backward()
    assert y.dtype == dtype and xm.grad.dtype == dtype
    assert torch.equal(y.detach().cpu(), r.detach().to(dtype))
    assert torch.equal(xm.grad.cpu(), xr.grad.to(dtype))


def test_every_opinfo_pair_cuda_has_and_the_cpu_lacks_runs_or_is_listed():
    """OpInfo's dtypesIfCUDA against its CPU dtypes: each float16/bfloat16 pair runs on
    musa (through half_upcast or a CPU kernel OpInfo does not list), or NOT_COVERED says
    why it cannot."""
    ran, listed = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in load_testing_db("common_methods_invocations", "op_db"):
            for dtype in HALF:
                if dtype not in op.supported_dtypes("cuda") or dtype in op.supported_dtypes("cpu"):
                    continue
                name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
                if any(fnmatch.fnmatch(name, p) for p in half_upcast.NOT_COVERED):
                    listed.append(name)
                    continue
                for s in list(op.sample_inputs("cpu", dtype))[:2]:
                    args = [s.input, *s.args]
                    args = [a.musa() if isinstance(a, torch.Tensor) else a for a in args]
                    kwargs = {k: v.musa() if isinstance(v, torch.Tensor) else v for k, v in s.kwargs.items()}
                    try:
                        out = op(*args, **kwargs)
                    except Exception as e:
                        pytest.fail(f"{name} {dtype}: {type(e).__name__}: {e}"[:300])
                    outs = out if isinstance(out, (tuple, list)) else [out]
                    assert all(o.device.type == "musa" for o in outs if isinstance(o, torch.Tensor)), name
                ran.append(name)
    assert {"nn.functional.avg_pool3d", "nn.functional.multi_margin_loss"} <= set(ran)
    assert "nn.functional.rrelu" in listed and any(n.startswith("fft.") for n in listed)


@pytest.mark.slow
@pytest.mark.requires_host_driver("the simulated profiles are the host driver's")
def test_the_profile_holds_for_these_ops(subpython):
    """On the S80: bfloat16 and float64 are refused as by every other op; float64 computes
    in float32 under Dynamic Double Casting."""
    r = subpython("""
        import torch, torch_musa
        import torch.nn.functional as F
        from torch_musa.ops import registry
        x = torch.randn(1, 2, 4, 4, 4)
        for dt in (torch.bfloat16, torch.float64):
            try:
                F.avg_pool3d(x.to(dt).musa(), 2)
                print("no error", dt)
            except RuntimeError as e:
                print("refused", dt, "MTT S80" in str(e))
        registry.set_double_cast(True)
        y = F.avg_pool3d(x.double().musa(), 2)
        print(y.dtype, torch.equal(y.cpu(), F.avg_pool3d(x, 2).double()))
    """, {"TORCH_MUSA_PROFILE": "s80"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["refused torch.bfloat16 True", "refused torch.float64 True",
                                        "torch.float64 True"], r.stdout

"""Output layouts on musa match the CPU's and the meta kernels' (a sampled layout sweep).

A musa kernel that returns the right values in another layout (contiguous where the
meta kernel promises the input's memory format) passes value tests but makes eager
``.view`` / ``out=`` / ``as_strided`` code and compiled code read wrong data.
``python -m torch_musa.testing.layout_sweep`` runs the whole op_db; here the ops that
reach musa's own kernels (Python kernels in torch_musa/ops, attention, convolution,
dropout, the view kernels) plus every 40th op of the database.
"""
import pytest
import torch

from torch_musa.attention import flash_constraint_failures
from torch_musa.testing import layout_sweep

# Ops served by musa's own kernels (not the CPU's registered as musa's).
OWN_KERNELS = [
    "nn.functional.scaled_dot_product_attention", "nn.functional.conv2d", "nn.functional.conv_transpose2d",
    "nn.functional.dropout", "native_dropout_backward", "_upsample_bilinear2d_aa",
    "nn.functional.interpolate.bicubic", "nn.functional.avg_pool3d", "nn.functional.multi_margin_loss",
    "nn.functional.multilabel_margin_loss", "nn.functional.ctc_loss", "as_strided", "unfold",
    "view", "reshape", "view_as_complex", "tensor_split", "transpose", "resize_",
]
SAMPLE = 40


@pytest.fixture(scope="module")
def results():
    from torch_musa.ops import registry

    registry.set_fallback_mode("silent")
    try:
        names = set(OWN_KERNELS) | {op.name for op in layout_sweep.ops(sample=SAMPLE)}
        # float16 reaches musa-only paths (flash SDPA, half_upcast's kernels)
        return layout_sweep.sweep(names=names) + layout_sweep.sweep(names=set(OWN_KERNELS),
                                                                    dtypes=(torch.float16,))
    finally:
        registry.set_fallback_mode("warn")


def test_known_mismatches_have_reasons():
    # (op, variant, output kind, field) -> why; the sweep counts them apart
    assert layout_sweep.KNOWN
    assert all(isinstance(r, str) and len(r) > 40 for r in layout_sweep.KNOWN.values())


@pytest.mark.slow
def test_musa_layouts_match_cpu_and_meta(results):
    ran = {r.op for r in results if r.samples}
    assert {"nn.functional.scaled_dot_product_attention", "_upsample_bilinear2d_aa",
            "nn.functional.conv2d"} <= ran
    assert len(ran) >= 25 and sum(r.samples for r in results) >= 150
    bad = [m for r in results for m in layout_sweep.musa_owned(r) if layout_sweep.known_reason(m) is None]
    assert not bad, "\n".join(f"{m.op} {m.sample} {m.where} vs {m.against}: {m.field} musa={m.musa} "
                              f"ref={m.reference}" for m in bad)
    # as given, non-contiguous, transposed memory and channels_last, for each of 3 samples
    assert any(t.endswith("/out-transposed") for r in results for t in r.contract_samples)  # out= forms
    aa = next(r for r in results if r.op == "_upsample_bilinear2d_aa")
    assert aa.samples >= 12 and aa.meta_ran == aa.samples


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_antialiased_upsample_keeps_channels_last(dtype):
    """half_upcast's kernels wrote into contiguous outputs; the CPU and meta keep channels_last."""
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    ref = torch.ops.aten._upsample_bilinear2d_aa(x, [5, 6], False)
    xm = x.to(dtype).to("musa").contiguous(memory_format=torch.channels_last).requires_grad_()
    out = torch.ops.aten._upsample_bilinear2d_aa(xm, [5, 6], False)
    meta = torch.ops.aten._upsample_bilinear2d_aa(x.to("meta"), [5, 6], False)
    assert out.stride() == ref.stride() == meta.stride()
    assert out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out.float().cpu(), ref, atol=1e-2 if dtype == torch.float16 else 1e-5, rtol=1e-2)
    go = torch.randn(2, 3, 5, 6).contiguous(memory_format=torch.channels_last)
    (g,) = torch.autograd.grad(out, xm, go.to(dtype).to("musa").contiguous(memory_format=torch.channels_last))
    xc = x.clone().requires_grad_()
    (g_ref,) = torch.autograd.grad(torch.ops.aten._upsample_bilinear2d_aa(xc, [5, 6], False), xc, go)
    assert g.stride() == g_ref.stride() and g.is_contiguous(memory_format=torch.channels_last)


def test_compiled_channels_last_convolutions_match_eager():
    """The reason behind KNOWN's convolution entries: compiled code assumes contiguous gradients
    (PyTorch's fake for PrivateUse1's conv backend), eager gives channels_last as the CPU does, and
    compiled values still match eager."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.ConvTranspose2d(8, 4, 3))
    m = m.to("musa").to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 10, 10, device="musa").contiguous(memory_format=torch.channels_last).requires_grad_()

    def grads(f):
        out = f(x)
        w = torch.arange(out.numel(), device="musa").reshape(out.shape) % 3 + 1
        return [out] + list(torch.autograd.grad((out * w).sum(), [x, *m.parameters()]))

    eager, compiled = grads(m), grads(torch.compile(m))
    assert eager[1].is_contiguous(memory_format=torch.channels_last)  # as on the CPU
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


@pytest.mark.requires_host_driver(
    "musa's own flash kernel; under the cuda driver a float mask takes CUDA's memory-efficient "
    "kernel, whose bias gradient is contiguous as on cuda")
def test_flash_attention_mask_grad_takes_the_masks_layout():
    """The flash backward's bias gradient is laid out as the mask (the meta's empty_like), not
    contiguous: a transposed float mask's gradient was (6, 1) where compile assumes (1, 3)."""
    q, k, v = (torch.randn(2, 2, n, 8, dtype=torch.float16) for n in (3, 6, 6))
    mask = torch.randn(6, 3, dtype=torch.float16).t()
    qm, km, vm = (t.to("musa").requires_grad_() for t in (q, k, v))
    mm = mask.to("musa").t().contiguous().t().requires_grad_()
    assert mm.stride() == (1, 3)
    out = torch.nn.functional.scaled_dot_product_attention(qm, km, vm, attn_mask=mm)
    assert flash_constraint_failures(qm, km, vm, mm) == []  # musa's flash kernel, not math
    grads = torch.autograd.grad(out.float().sum(), (qm, km, vm, mm))
    assert grads[3].stride() == mm.stride()
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    fq, fk, fv, fm = (mode.from_tensor(t) for t in (qm, km, vm, mm))
    with mode:
        fgrads = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
            fq, fk, fv, attn_mask=fm).float().sum(), (fq, fk, fv, fm))
    assert [g.stride() for g in grads] == [g.stride() for g in fgrads]


@pytest.mark.parametrize("empty_out", [True, False])
def test_mode_out_runs_on_musa_and_keeps_out_strides(empty_out):
    """torch.mode(x, out=...) raised "mode only supports CPU, CUDA and XPU device type" on musa
    (a composite out= kernel that checks the device); it now runs the CPU's path into the out
    tensors: resized when empty, written through (strides kept) when of the right shape."""
    x = torch.randn(3, 4, 5)
    res = []
    for dev in ("cpu", "musa"):
        v, i = ((torch.empty(0, device=dev), torch.empty(0, dtype=torch.long, device=dev)) if empty_out else
                (torch.empty(4, 3, device=dev).t(), torch.empty(4, 3, dtype=torch.long, device=dev).t()))
        ptr = v.data_ptr()
        got = torch.mode(x.to(dev), 2, out=(v, i))
        assert got[0] is v and got[1] is i and (empty_out or v.data_ptr() == ptr)
        res.append((v.stride(), v.cpu(), i.cpu()))
    assert res[0][0] == res[1][0]
    torch.testing.assert_close(res[1][1], res[0][1])
    torch.testing.assert_close(res[1][2], res[0][2])


def test_the_comparison_catches_a_contiguous_output():
    """A kernel returning contiguous where the reference is transposed is reported, and a
    stock CPU-vs-meta difference on the same field is not counted against musa."""
    x = torch.randn(4, 5)
    a = layout_sweep.describe([x.t().contiguous()], ())
    b = layout_sweep.describe([x.t()], ())
    assert layout_sweep.diff(a, b, "out") == [("out[0]", "strides", "(4, 1)", "(1, 5)")]
    r = layout_sweep.OpResult("op", samples=1)
    r.musa_vs_cpu = [layout_sweep.Mismatch("op", "0/as-is", "out[0]", "cpu", "strides", "(5, 1)", "(1, 4)")]
    assert len(layout_sweep.musa_owned(r)) == 1
    r.cpu_vs_meta = [layout_sweep.Mismatch("op", "0/as-is", "out[0]", "meta", "strides", "(1, 4)", "(5, 1)")]
    assert layout_sweep.musa_owned(r) == []
    # a musa-only backend that follows its own meta contract is not counted against the CPU
    r = layout_sweep.OpResult("op", samples=1, contract_samples=["0/as-is"])
    r.musa_vs_cpu = [layout_sweep.Mismatch("op", "0/as-is", "out[0]", "cpu", "strides", "(5, 1)", "(1, 4)")]
    assert layout_sweep.musa_owned(r) == []
    r.musa_vs_meta = [layout_sweep.Mismatch("op", "0/as-is", "out[0]", "meta", "strides", "(5, 1)", "(1, 4)")]
    assert len(layout_sweep.musa_owned(r)) == 1
    # aliasing: a view aliases its input, a copy does not
    assert layout_sweep.describe([x.view(20)], (x,))[0]["aliases_input"] is True
    assert layout_sweep.describe([x.clone()], (x,))[0]["aliases_input"] is False

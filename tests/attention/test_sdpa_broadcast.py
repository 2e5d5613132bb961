"""SDPA on musa chooses a fused kernel only where PyTorch's own rule for the CPU does.

Found with Whisper's beam search: a query batch of 3 against key/value of batch 1 was
handed to the CPU's flash kernel (``_scaled_dot_product_flash_attention_for_cpu``)
without the CPU device's checks (equal batch sizes first), which read out of bounds:
NaN in float32, a SIGSEGV in float64, and a (1, ...) output for a (1, ...) query
against (3, ...) keys where the CPU broadcasts to (3, ...). musa now asks the CPU's
``_fused_sdp_choice`` of CPU stand-ins of its inputs (torch_musa/attention/cpu_rule.py).

Comparisons are with the CPU device: ``torch.equal`` where both run the same kernel
(float32/float64 always: the CPU's fused kernel or the math path, chosen by the same
rule; any dtype where both take the math path), else ``assert_close`` with the
flash-vs-math tolerance of tests/attention/test_sdpa.py (musa's own flash kernel for
float16/bfloat16 against the CPU's).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_musa.attention
from torch_musa.attention import cpu_rule, select_backend

torch_musa.attention.register()

DEV = "musa"
HOST = pytest.mark.requires_host_driver(
    "bit equality with the CPU device: the host driver runs the CPU's kernels (under the cuda "
    "driver SDPA takes the GPU's own rule and kernels, tests/core/test_cuda_driver.py)")
#: musa's flash kernel (float32 accumulation, its own tiling) vs the CPU's kernels.
TOL = {torch.float16: dict(rtol=2e-2, atol=2e-2), torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
       torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}
#: Under the cuda driver float32 runs on the GPU (its own reductions).
CROSS_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-9, atol=1e-9)}
MATH, FLASH = int(SDPBackend.MATH), int(SDPBackend.FLASH_ATTENTION)


def _host():
    from torch_musa.config import CONFIG

    return CONFIG.driver != "cuda"


def _attend(dev, q, k, v, mask=None, grad=False, **kw):
    """Output (and q/k/v gradients with ``grad``) on ``dev``, back on the CPU."""
    ts = [t.to(dev).requires_grad_(grad) for t in (q, k, v)]
    m = None if mask is None else mask.to(dev)
    out = F.scaled_dot_product_attention(*ts, attn_mask=m, **kw)
    if not grad:
        return out.detach().cpu(), []
    grads = torch.autograd.grad(out, ts, torch.ones_like(out))
    return out.detach().cpu(), [g.cpu() for g in grads]


def _same_kernel(q, k, v, mask, **kw) -> bool:
    """Whether musa runs the CPU device's kernel for these inputs: float32/float64 always
    (both the CPU's rule), other dtypes where musa's choice and the CPU's are both math."""
    if q.dtype in (torch.float32, torch.float64):
        return True
    mq, mk, mv = (t.to(DEV) for t in (q, k, v))
    mm = None if mask is None else mask.to(DEV)
    musa = select_backend(mq, mk, mv, mm, kw.get("dropout_p", 0.0), kw.get("is_causal", False),
                          kw.get("scale"), kw.get("enable_gqa", False))
    cpu = int(torch._fused_sdp_choice(q, k, v, mask, kw.get("dropout_p", 0.0),
                                      kw.get("is_causal", False), scale=kw.get("scale"),
                                      enable_gqa=kw.get("enable_gqa", False)))
    return musa == MATH and cpu == MATH


def _compare(q, k, v, mask=None, grad=True, **kw):
    want, want_g = _attend("cpu", q, k, v, mask, grad, **kw)
    got, got_g = _attend(DEV, q, k, v, mask, grad, **kw)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert not got.isnan().any() or want.isnan().any()
    exact = _host() and _same_kernel(q, k, v, mask, **kw)
    tol = TOL[q.dtype] if _host() else CROSS_TOL.get(q.dtype, TOL[q.dtype])
    for a, b in zip([got] + got_g, [want] + want_g):
        if exact:
            assert torch.equal(a, b), (a - b).abs().max()
        else:
            _close(a, b, tol)


def _close(got, want, tol):
    """assert_close with the absolute tolerance scaled by the tensor's largest element:
    OpInfo's samples reach |x| ~ 9, so gradients of ~40 where bfloat16's spacing is 0.25
    (the CPU's own bfloat16 result is as far from a float64 reference as musa's)."""
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=tol["rtol"], atol=tol["atol"] * scale)


def _qkv(qb, kb, dtype, hq=2, hk=2, lq=3, lk=1500, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(qb, hq, lq, d, generator=g).to(dtype)
    k = torch.randn(kb, hk, lk, d, generator=g).to(dtype)
    v = torch.randn(kb, hk, lk, d, generator=g).to(dtype)
    return q, k, v


DTYPES = [torch.float32, torch.float64, torch.bfloat16]
BATCHES = [pytest.param(3, 1, id="q3-kv1"), pytest.param(1, 3, id="q1-kv3")]


@pytest.mark.parametrize("qb,kb", BATCHES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_whisper_beam_search_shapes(qb, kb, dtype):
    """The report's shapes: (3, 2, 3, 32) against (1, 2, 1500, 32) and back; musa gave NaN
    (float32) and a (1, 2, 3, 32) output where the CPU broadcasts to (3, 2, 3, 32)."""
    q, k, v = _qkv(qb, kb, dtype)
    _compare(q, k, v, grad=False)


@pytest.mark.slow
@pytest.mark.parametrize("qb,kb", BATCHES)
def test_float64_broadcast_batch_does_not_crash(qb, kb, subpython):
    """float64 crashed the process (SIGSEGV in the CPU flash kernel): run in a child so
    that a crash fails this test, not pytest."""
    r = subpython(f"""
        import torch, torch_musa, torch.nn.functional as F
        g = torch.Generator().manual_seed(0)
        q = torch.randn({qb}, 2, 3, 32, generator=g, dtype=torch.float64)
        k = torch.randn({kb}, 2, 1500, 32, generator=g, dtype=torch.float64)
        v = torch.randn({kb}, 2, 1500, 32, generator=g, dtype=torch.float64)
        want = F.scaled_dot_product_attention(q, k, v)
        got = F.scaled_dot_product_attention(q.to("musa"), k.to("musa"), v.to("musa")).cpu()
        assert got.shape == want.shape, (got.shape, want.shape)
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
        print("OK", tuple(got.shape))
    """, timeout=300)
    assert r.returncode == 0, f"child exited {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert f"OK (3, 2, 3, 32)" in r.stdout


MASKS = [None, "bool2d", "float4d-batch1", "float4d-full"]


def _mask(kind, qb, kb, hq, lq, lk, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    if kind is None:
        return None
    if kind == "bool2d":
        m = torch.rand(lq, lk, generator=g) > 0.3
        m[:, 0] = True
        return m
    b = 1 if kind == "float4d-batch1" else max(qb, kb)
    return torch.randn(b, 1, lq, lk, generator=g).to(dtype)


def _grid():
    # is_causal goes without an explicit mask here (test_mask_and_causal_as_the_cpu)
    for gqa in (False, True):
        for causal, masks in ((False, MASKS), (True, [None])):
            for mask in masks:
                for dtype in DTYPES:
                    for qb, kb in ((3, 1), (1, 3), (2, 2)):
                        yield pytest.param(qb, kb, dtype, mask, causal, gqa, id=(
                            f"q{qb}-kv{kb}-{str(dtype)[6:]}-{mask}" + "-causal" * causal
                            + "-gqa" * gqa))


@pytest.mark.parametrize("qb,kb,dtype,mask,causal,gqa", list(_grid()))
def test_broadcast_batch_matches_the_cpu(qb, kb, dtype, mask, causal, gqa):
    """Every combination, forward and q/k/v gradients, against the CPU device."""
    hq, hk, lq, lk = (4, 2, 5, 40) if gqa else (2, 2, 5, 40)
    q, k, v = _qkv(qb, kb, dtype, hq=hq, hk=hk, lq=lq, lk=lk, d=16)
    m = _mask(mask, qb, kb, hq, lq, lk, dtype)
    _compare(q, k, v, m, is_causal=causal, enable_gqa=gqa)


@pytest.mark.parametrize("qb,kb", [pytest.param(3, 3, id="expanded")])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_expanded_batch_takes_the_cpus_fused_kernel(qb, kb, dtype):
    """Keys expanded to the query's batch (stride 0) are equal batch sizes: the CPU takes
    its fused kernel and so does musa, with the same bits."""
    q, k, v = _qkv(qb, 1, dtype, lk=40, d=16)
    k, v = k.expand(qb, -1, -1, -1), v.expand(qb, -1, -1, -1)
    _compare(q, k, v)


@HOST
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_float_choice_is_the_cpus(dtype):
    """musa takes the CPU's fused kernel exactly where the CPU's rule answers FLASH, and
    the math path otherwise (checked on the kernel the autograd graph records)."""
    cases = [  # (q shape, k shape, kwargs, mask shape or None)
        ((2, 2, 5, 16), (2, 2, 7, 16), {}, None),
        ((3, 2, 5, 16), (1, 2, 7, 16), {}, None),
        ((1, 2, 5, 16), (3, 2, 7, 16), {}, None),
        ((2, 4, 5, 16), (2, 2, 7, 16), dict(enable_gqa=True), None),
        ((2, 4, 5, 16), (2, 2, 7, 16), {}, None),        # GQA heads without enable_gqa: error
        ((2, 2, 5, 16), (2, 2, 7, 16), dict(dropout_p=0.5), None),
        ((2, 2, 5, 16), (2, 2, 7, 16), {}, (2, 5, 7)),   # 3-D mask
        ((2, 2, 5, 16), (2, 2, 7, 16), {}, (5, 7)),
        ((2, 2, 5, 16), (2, 2, 7, 16), {}, (1, 2, 5, 7)),
        ((2, 2, 5, 16), (2, 2, 7, 8), {}, None),          # head dims differ
        ((5, 16), (7, 16), {}, None),                     # 2-D
    ]
    for qs, ks, kw, ms in cases:
        q, k = torch.randn(qs, dtype=dtype), torch.randn(ks, dtype=dtype)
        v = torch.randn(ks, dtype=dtype)
        m = None if ms is None else torch.randn(ms, dtype=dtype)
        want = int(torch._fused_sdp_choice(q, k, v, m, **kw))
        mq, mk, mv = (t.to(DEV).requires_grad_() for t in (q, k, v))
        assert cpu_rule.cpu_choice(mq, mk, mv, None if m is None else m.to(DEV), **kw) == want
        try:
            cpu_out = F.scaled_dot_product_attention(q.requires_grad_(), k, v, attn_mask=m, **kw)
        except RuntimeError as e:
            with pytest.raises(RuntimeError):
                F.scaled_dot_product_attention(mq, mk, mv, attn_mask=None if m is None else m.to(DEV),
                                               **kw)
            continue
        out = F.scaled_dot_product_attention(mq, mk, mv, attn_mask=None if m is None else m.to(DEV),
                                             **kw)
        assert ("FlashAttentionForCpu" in type(out.grad_fn).__name__) == (want == FLASH), \
            (qs, ks, kw, ms, type(out.grad_fn).__name__)
        assert type(out.grad_fn).__name__ == type(cpu_out.grad_fn).__name__
        if not kw.get("dropout_p"):
            assert torch.equal(out.detach().cpu(), cpu_out.detach())


def test_mask_requiring_grad_and_noncontiguous_last_dim_take_math_as_on_the_cpu():
    q, k, v = (torch.randn(2, 2, n, 16) for n in (5, 7, 7))
    mask = torch.randn(1, 2, 5, 7, requires_grad=True)
    assert int(torch._fused_sdp_choice(q, k, v, mask)) == MATH
    mq, mk, mv, mm = (t.detach().to(DEV).requires_grad_() for t in (q, k, v, mask))
    assert cpu_rule.cpu_choice(mq, mk, mv, mm) == MATH
    assert cpu_rule.cpu_choice(mq, mk, mv, mm.detach()) == FLASH
    qt = torch.randn(2, 2, 16, 5).transpose(-1, -2)
    assert int(torch._fused_sdp_choice(qt, k, v)) == MATH
    assert cpu_rule.cpu_choice(qt.to(DEV), mk, mv) == MATH
    _compare(qt, k, v)


@HOST
def test_mask_and_causal_as_the_cpu():
    """The CPU's rule takes its fused kernel for a float mask with is_causal (and the
    kernel accepts both); musa does the same, with the same bits."""
    q, k, v = _qkv(2, 2, torch.float32, lq=5, lk=7, d=16)
    m = torch.randn(5, 7)
    assert int(torch._fused_sdp_choice(q, k, v, m, 0.0, True)) == FLASH
    out = F.scaled_dot_product_attention(*(t.to(DEV).requires_grad_() for t in (q, k, v)),
                                         attn_mask=m.to(DEV), is_causal=True)
    assert "FlashAttentionForCpu" in type(out.grad_fn).__name__
    _compare(q, k, v, m, is_causal=True)


@pytest.mark.requires_host_driver("musa's own flash kernel and its choice rule")
def test_musa_flash_refuses_what_the_cpu_rule_refuses():
    """float16/bfloat16: musa's own flash kernel is taken only where the CPU's rule would
    take its fused kernel (besides musa's own limits); forced, the error names the
    CPU rule's reason. Dropout and a mask that requires grad stay musa's (its kernel has
    both, the CPU's has not)."""
    q, k, v = (t.to(DEV) for t in _qkv(2, 2, torch.float16, lq=5, lk=8, d=16))
    assert select_backend(q, k, v) == int(SDPBackend.OVERRIDEABLE)
    m3 = torch.randn(2, 5, 8, dtype=torch.float16, device=DEV)  # 3-D: the CPU rule refuses
    assert select_backend(q, k, v, m3) == MATH
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError, match="attn mask shapes"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=m3)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=m3)  # math, as on the CPU
    want = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), attn_mask=m3.cpu())
    assert torch.equal(o.cpu(), want)
    m4 = torch.randn(2, 1, 5, 8, dtype=torch.float16, device=DEV, requires_grad=True)
    assert select_backend(q, k, v, m4) == int(SDPBackend.OVERRIDEABLE)
    assert select_backend(q, k, v, None, 0.3) == int(SDPBackend.OVERRIDEABLE)
    qb = q[:1]
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError, match="batch sizes"):
        F.scaled_dot_product_attention(qb, k, v)
    # the switches the CPU rule was asked under are restored
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        select_backend(q, k, v)
        assert torch.backends.cuda.flash_sdp_enabled() and not torch.backends.cuda.math_sdp_enabled()
    with sdpa_kernel(SDPBackend.OVERRIDEABLE):
        assert select_backend(q, k, v) == int(SDPBackend.OVERRIDEABLE)
        assert not torch.backends.cuda.flash_sdp_enabled() and not torch.backends.cuda.math_sdp_enabled()


@HOST
def test_compiled_broadcast_batch_matches_the_cpu():
    """While torch.compile traces, the CPU rule is asked of uninitialised CPU stand-ins of
    the fake inputs; the compiled result is the CPU's."""
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), backend="aot_eager")
    for qb, kb in ((3, 1), (1, 3), (2, 2)):
        q, k, v = _qkv(qb, kb, torch.float32, lq=5, lk=40, d=16)
        want = F.scaled_dot_product_attention(q, k, v)
        got = fn(q.to(DEV), k.to(DEV), v.to(DEV)).cpu()
        assert torch.equal(got, want), (qb, kb)


# OpInfo's own samples ---------------------------------------------------------------

def _opinfo_samples(dtype):
    from torch_musa.testing.sweep_common import load_testing_db

    # Not a plain import: PyTorch's harness freezes torch.backends' flags on import,
    # which later `torch.backends.cudnn.benchmark = True` lines in this process hit.
    op_db = load_testing_db("common_methods_invocations", "op_db")
    ops = [o for o in op_db if o.name == "nn.functional.scaled_dot_product_attention"]
    assert ops, "no SDPA OpInfo in this PyTorch"
    for op in ops:
        yield from op.sample_inputs("cpu", dtype, requires_grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16],
                         ids=str)
def test_opinfo_samples_match_the_cpu(dtype):
    """OpInfo's samples for nn.functional.scaled_dot_product_attention (3-D queries against
    4-D keys among them: broadcast batch dims), forward and gradients. Dropout samples draw
    from the same seed on both devices: equal where both run the math path's dropout."""
    n = 0
    for s in _opinfo_samples(dtype):
        q, (k, v) = s.input, s.args[:2]
        kw = dict(s.kwargs)
        mask = kw.pop("attn_mask", None)
        res = []
        for dev in ("cpu", DEV):
            ts = [t.detach().to(dev).requires_grad_() for t in (q, k, v)]
            torch.manual_seed(7)
            out = F.scaled_dot_product_attention(*ts, attn_mask=None if mask is None else mask.to(dev),
                                                 **kw)
            grads = torch.autograd.grad(out, ts, torch.ones_like(out))
            res.append([out.detach().cpu()] + [g.cpu() for g in grads])
        exact = _host() and _same_kernel(q.detach(), k.detach(), v.detach(), mask, **kw)
        for got, want in zip(res[1], res[0]):
            assert got.shape == want.shape
            if exact:
                assert torch.equal(got, want), (tuple(q.shape), tuple(k.shape), kw)
            elif kw.get("dropout_p", 0.0) == 0.0:
                _close(got, want, TOL[dtype] if _host() else CROSS_TOL.get(dtype, TOL[dtype]))
        n += 1
    assert n > 0


def test_cpu_rule_reads_requires_grad_of_the_mask_only():
    """cpu_rule hands the CPU rule query/key/value stand-ins that do not require grad
    (aliases are never marked); that is exact only while PyTorch's rule ignores their
    requires_grad for dense tensors. The mask's it reads: carried over."""
    for shapes in [((2, 2, 5, 16), (2, 2, 7, 16)), ((3, 2, 5, 16), (1, 2, 7, 16)),
                   ((2, 4, 5, 16), (2, 2, 7, 16))]:
        for gqa in (False, True):
            q, k = torch.randn(shapes[0]), torch.randn(shapes[1])
            plain = int(torch._fused_sdp_choice(q, k, k, enable_gqa=gqa))
            qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
            assert int(torch._fused_sdp_choice(qg, kg, kg, enable_gqa=gqa)) == plain
    q = torch.randn(2, 2, 5, 16)
    m = torch.randn(1, 2, 5, 5)
    assert int(torch._fused_sdp_choice(q, q, q, m)) == FLASH
    assert int(torch._fused_sdp_choice(q, q, q, m.requires_grad_())) == MATH


@HOST
def test_inference_mode_and_no_grad_with_a_mask_that_requires_grad():
    """The stand-in of a mask that requires grad is a fresh leaf: marking an alias failed
    ('requires_grad=True on inference tensor outside InferenceMode') once the fallback's
    alias pool had handed out a TensorImpl made under inference mode."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, n, 16, generator=g) for n in (5, 7, 7))
    m = torch.randn(1, 2, 5, 7, generator=g)
    mq, mk, mv = (t.to(DEV).requires_grad_() for t in (q, k, v))
    mm = m.to(DEV).requires_grad_()
    cm = m.clone().requires_grad_()
    for ctx in (torch.inference_mode, torch.no_grad, torch.inference_mode, torch.enable_grad):
        with ctx():
            a = F.scaled_dot_product_attention(mq, mk, mv)
            b = F.scaled_dot_product_attention(mq, mk, mv, attn_mask=mm)
            want_a = F.scaled_dot_product_attention(q, k, v)
            want_b = F.scaled_dot_product_attention(q, k, v, attn_mask=cm)
        assert torch.equal(a.detach().cpu(), want_a.detach())
        assert torch.equal(b.detach().cpu(), want_b.detach())
    assert cpu_rule.cpu_choice(mq, mk, mv, mm) == MATH

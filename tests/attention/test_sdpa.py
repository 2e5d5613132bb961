"""scaled_dot_product_attention on musa: flash vs math, backend selection, errors, memory."""
import math
import random

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_musa.amp
import torch_musa.attention
from torch_musa.attention import flash
from torch_musa.testing.reference import kernel_device

torch_musa.amp.register()
torch_musa.attention.register()

DEV = "musa"
TOL = {torch.float16: dict(rtol=2e-2, atol=2e-2), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}
OWN_KERNELS = pytest.mark.requires_host_driver(
    "musa's own SDPA kernels and their per-arch limits; under the cuda driver SDPA takes the GPU's "
    "kernels (tests/core/test_cuda_driver.py)")


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 16 x 32 so that small shapes cross many tile borders."""
    monkeypatch.setattr(flash, "BLOCK_M", 16)
    monkeypatch.setattr(flash, "BLOCK_N", 32)


def _qkv(B, Hq, Hk, L, S, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype).to(DEV).requires_grad_()  # noqa: E731
    return mk(B, Hq, L, D), mk(B, Hk, S, D), mk(B, Hk, S, D)


def _run(backend, q, k, v, grad, **kw):
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(q, k, v, **kw)
    inputs = [q, k, v] + ([kw["attn_mask"]] if isinstance(kw.get("attn_mask"), torch.Tensor)
                          and kw["attn_mask"].requires_grad else [])
    return out, torch.autograd.grad(out, inputs, grad)


def _cases():
    rnd = random.Random(1234)
    cases = []
    for i in range(10):
        Hk = rnd.choice([1, 2])
        gqa = rnd.random() < 0.4
        Hq = Hk * (rnd.choice([2, 3]) if gqa else 1)
        L, S = rnd.randint(1, 70), rnd.randint(1, 90)
        mask = rnd.choice([None, "bool", "additive", "additive_grad"])
        causal = mask is None and rnd.random() < 0.5
        cases.append(dict(B=rnd.choice([1, 2]), Hq=Hq, Hk=Hk, L=L, S=S, D=rnd.choice([8, 16, 40, 64]),
                          mask=mask, causal=causal, gqa=gqa,
                          scale=rnd.choice([None, 0.3]), dtype=rnd.choice([torch.float16, torch.bfloat16])))
    return [_case_param(c) for c in cases]


def _case_param(c):
    marks = []
    if c["mask"]:
        marks.append(pytest.mark.requires_host_driver("CUDA's flash kernel takes no attention mask; musa's does"))
    if c["gqa"]:
        marks.append(pytest.mark.requires_host_driver("CUDA's flash kernel takes no grouped-query attention; "
                                                      "musa's does"))
    return pytest.param(c, id="-".join(f"{k}{v}" for k, v in c.items()), marks=marks)


@pytest.mark.parametrize("case", _cases())
def test_flash_matches_math(case, small_tiles):
    c = case
    q, k, v = _qkv(c["B"], c["Hq"], c["Hk"], c["L"], c["S"], c["D"], c["dtype"])
    kw = dict(is_causal=c["causal"], scale=c["scale"], enable_gqa=c["gqa"])
    if c["mask"] == "bool":
        m = torch.rand(c["L"], c["S"]) > 0.3
        m[:, 0] = True  # no fully masked rows here (see test_fully_masked_rows)
        kw["attn_mask"] = m.to(DEV)
    elif c["mask"]:
        m = torch.randn(c["B"], 1, c["L"], c["S"]).to(c["dtype"]).to(DEV)
        kw["attn_mask"] = m.requires_grad_(c["mask"] == "additive_grad")
    grad = torch.randn(c["B"], c["Hq"], c["L"], c["D"]).to(c["dtype"]).to(DEV)
    fo, fg = _run(SDPBackend.FLASH_ATTENTION, q, k, v, grad, **kw)
    mo, mg = _run(SDPBackend.MATH, q, k, v, grad, **kw)
    assert fo.dtype == c["dtype"] and fo.shape == mo.shape
    torch.testing.assert_close(fo, mo, **TOL[c["dtype"]])
    for a, b in zip(fg, mg):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, **TOL[c["dtype"]])


def test_math_matches_cpu_for_every_feature():
    """float32 math on musa vs the CPU device: masks, causal, scale, GQA, forward and backward."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, s, 5, 8, generator=g) for s in (4, 2, 2))
    masks = [None, torch.rand(5, 5, generator=g) > 0.4, torch.randn(2, 1, 5, 5, generator=g)]
    for mask in masks:
        for causal in ([False, True] if mask is None else [False]):
            outs = []
            for dev in ("cpu", DEV):
                t = [x.to(dev).requires_grad_() for x in (q, k, v)]
                with sdpa_kernel(SDPBackend.MATH):
                    o = F.scaled_dot_product_attention(
                        *t, attn_mask=None if mask is None else mask.to(dev), is_causal=causal,
                        scale=0.7, enable_gqa=True)
                grads = torch.autograd.grad(o, t, torch.ones_like(o))
                outs.append([o.detach().cpu()] + [x.cpu() for x in grads])
            for a, b in zip(*outs):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend,dtype", [
    pytest.param(SDPBackend.MATH, torch.float32, id="math"),
    pytest.param(SDPBackend.FLASH_ATTENTION, torch.float16, id="flash", marks=OWN_KERNELS)])
def test_dropout_through_sdpa_is_seeded(backend, dtype):
    """The same seed draws the same dropout, forward and backward; without dropout the output differs."""
    q, k, v = _qkv(1, 2, 2, 20, 20, 16, dtype)
    outs = []
    for _ in range(2):
        torch.manual_seed(5)
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
        if backend == SDPBackend.FLASH_ATTENTION:
            assert "Overrideable" in type(o.grad_fn).__name__  # musa's own flash kernel ran
        o.sum().backward()
        outs.append(o.detach())
    torch.testing.assert_close(outs[0], outs[1])
    with sdpa_kernel(backend):
        plain = F.scaled_dot_product_attention(q, k, v)
    assert not torch.allclose(outs[0], plain)


@pytest.mark.parametrize("causal,Hk", [(False, 2), (True, 2), (True, 1)])
def test_flash_dropout_forward_and_backward_match_the_masked_reference(small_tiles, causal, Hk):
    B, H, L, S, D, p, seed = 1, 2, 40, 70, 16, 0.3, 77
    q, k, v = (t.detach().float() for t in _qkv(B, H, Hk, L, S, D, torch.float16))
    keep = flash.dropout_mask(seed, B, H, L, S, p, DEV)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    scores = qr @ kr.repeat_interleave(H // Hk, 1).transpose(-1, -2) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1).to(DEV), float("-inf"))
    ref = (torch.softmax(scores, -1) * keep / (1 - p)) @ vr.repeat_interleave(H // Hk, 1)
    grad = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, (qr, kr, vr), grad)
    out, lse = flash.flash_attention_forward(q, k, v, dropout_p=p, is_causal=causal, seed=seed)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    grads = flash.flash_attention_backward(grad, q, k, v, out, lse, dropout_p=p, is_causal=causal,
                                           seed=seed)[:3]
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@OWN_KERNELS
def test_fully_masked_rows_give_zeros_like_math(small_tiles):
    q, k, v = _qkv(1, 1, 1, 8, 40, 16, torch.float16)
    m = torch.ones(8, 40, dtype=torch.bool)
    m[3] = False
    m = m.to(DEV)
    grad = torch.ones(1, 1, 8, 16, dtype=torch.float16, device=DEV)
    fo, fg = _run(SDPBackend.FLASH_ATTENTION, q, k, v, grad, attn_mask=m)
    mo, mg = _run(SDPBackend.MATH, q, k, v, grad, attn_mask=m)
    assert torch.all(fo[0, 0, 3] == 0)
    torch.testing.assert_close(fo, mo, **TOL[torch.float16])
    for a, b in zip(fg, mg):
        assert a.isfinite().all()
        torch.testing.assert_close(a, b, **TOL[torch.float16])


@OWN_KERNELS
def test_default_choice():
    q, k, v = _qkv(1, 2, 2, 8, 8, 16, torch.float16)
    o = F.scaled_dot_product_attention(q, k, v)
    assert "Overrideable" in type(o.grad_fn).__name__  # flash for float16 by default
    choice = torch.ops.aten._fused_sdp_choice(q, k, v)
    assert choice == int(SDPBackend.OVERRIDEABLE)
    q32 = q.detach().float()
    assert torch.ops.aten._fused_sdp_choice(q32, q32, q32) == int(SDPBackend.MATH)
    with sdpa_kernel(SDPBackend.MATH):
        assert torch.ops.aten._fused_sdp_choice(q, k, v) == int(SDPBackend.MATH)
    with sdpa_kernel(SDPBackend.OVERRIDEABLE):
        assert torch.ops.aten._fused_sdp_choice(q, k, v) == int(SDPBackend.OVERRIDEABLE)


def test_priority_order_is_honoured():
    q, k, v = _qkv(1, 2, 2, 8, 8, 16, torch.float16)
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION], set_priority=True):
        choice = torch.ops.aten._fused_sdp_choice(q, k, v)
        if kernel_device() == "cpu":
            assert choice == int(SDPBackend.MATH)
        else:  # the cuda driver answers as the GPU's own rule does
            ref = [t.to(kernel_device()) for t in (q, k, v)]
            assert choice == torch.ops.aten._fused_sdp_choice(*ref)


BAD = [
    ("dtype must be float16 or bfloat16", lambda: _qkv(1, 2, 2, 8, 8, 16, torch.float32), {}),
    ("head_dim must be <= 128", lambda: _qkv(1, 1, 1, 4, 4, 136, torch.float16), {}),
    ("head_dim must be a multiple of 8", lambda: _qkv(1, 1, 1, 4, 4, 12, torch.float16), {}),
    ("pass enable_gqa=True", lambda: _qkv(1, 4, 2, 4, 4, 16, torch.float16), {}),
    ("must be a multiple of key/value heads", lambda: _qkv(1, 3, 2, 4, 4, 16, torch.float16),
     dict(enable_gqa=True)),
    ("must be 4-D", lambda: [t[0] for t in _qkv(1, 2, 2, 4, 4, 16, torch.float16)], {}),
]


@pytest.mark.parametrize("msg,make,kw", BAD, ids=[b[0] for b in BAD])
@OWN_KERNELS
def test_forced_flash_names_the_failed_constraint(msg, make, kw):
    q, k, v = make()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError, match=msg):
        F.scaled_dot_product_attention(q, k, v, **kw)


@pytest.mark.parametrize("msg,make,kw", BAD[:3], ids=[b[0] for b in BAD[:3]])
def test_unsupported_cases_fall_back_to_math(msg, make, kw):
    q, k, v = make()
    o = F.scaled_dot_product_attention(q, k, v, **kw)
    assert "Overrideable" not in type(o.grad_fn).__name__
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        o2 = F.scaled_dot_product_attention(q, k, v, **kw)
    torch.testing.assert_close(o, o2)


@OWN_KERNELS
def test_no_enabled_backend_is_an_error():
    q, k, v = _qkv(1, 2, 2, 8, 8, 16, torch.float16)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), pytest.raises(RuntimeError, match="No available kernel"):
        F.scaled_dot_product_attention(q, k, v)


@OWN_KERNELS
def test_mask_with_causal_is_rejected():
    q, k, v = _qkv(1, 2, 2, 8, 8, 16, torch.float16)
    m = torch.ones(8, 8, dtype=torch.bool, device=DEV)
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True)


@pytest.mark.slow
@OWN_KERNELS
def test_head_dim_160_on_arch_3(subpython):
    code = """
        import torch, torch_musa, torch_musa.attention
        torch_musa.attention.register()
        from torch.nn.attention import sdpa_kernel, SDPBackend
        q = torch.randn(1, 1, 8, 160, device="musa", dtype=torch.float16)
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                o = torch.nn.functional.scaled_dot_product_attention(q, q, q)
            print("OK", o.shape[-1])
        except RuntimeError as e:
            print("ERR", e)
    """
    s5000 = subpython(code, env={"TORCH_MUSA_PROFILE": "s5000"})
    s4000 = subpython(code, env={"TORCH_MUSA_PROFILE": "s4000"})
    assert "OK 160" in s5000.stdout, s5000.stderr
    assert "head_dim must be <= 128 on MTT S4000 (MUSA arch 2.2)" in s4000.stdout, s4000.stderr


def test_inference_mode_and_no_grad_use_flash():
    q, k, v = (t.detach() for t in _qkv(1, 2, 2, 8, 8, 16, torch.float16))
    with torch.inference_mode():
        a = F.scaled_dot_product_attention(q, k, v)
    with sdpa_kernel(SDPBackend.MATH):
        b = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(a, b, **TOL[torch.float16])


def test_autocast_runs_attention_in_float16():
    q, k, v = (t.detach().float() for t in _qkv(1, 2, 2, 8, 8, 16, torch.float16))
    with torch.autocast(DEV):
        o = F.scaled_dot_product_attention(q, k, v)
    assert o.dtype == torch.float16


def test_transformer_layer_runs_on_flash():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    x = torch.randn(2, 10, 32)
    ref = layer(x)
    layer_m = layer.to(DEV)
    with torch.autocast(DEV), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = layer_m(x.to(DEV))
    out.float().sum().backward()
    torch.testing.assert_close(out.float().cpu(), ref, rtol=2e-2, atol=2e-2)


@OWN_KERNELS
def test_flash_peak_memory_is_linear():
    """Peak device memory: flash grows ~linearly with L, math ~quadratically."""
    peaks = {}
    for L in (512, 1024, 2048):
        q, k, v = (t.detach() for t in _qkv(1, 1, 1, L, L, 32, torch.float16))
        for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
            torch.musa.synchronize()
            base = torch.musa.memory_allocated()
            torch.musa.reset_peak_memory_stats()
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(q, k, v)
            peaks[be, L] = torch.musa.max_memory_allocated() - base
            del o
    flash_growth = peaks[SDPBackend.FLASH_ATTENTION, 2048] / peaks[SDPBackend.FLASH_ATTENTION, 1024]
    math_growth = peaks[SDPBackend.MATH, 2048] / peaks[SDPBackend.MATH, 1024]
    assert flash_growth < 2.1, peaks
    assert math_growth > 3.5, peaks
    assert peaks[SDPBackend.FLASH_ATTENTION, 2048] < peaks[SDPBackend.MATH, 2048] / 4, peaks

"""The real torch_musa's vendor operators (torch.gated_silu, F.swish_glu, F.rope,
nn.RoPE, nn.SwishGLU), checked against float64 references written from their
definitions, forward and backward."""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_musa  # noqa: F401


def _silu_glu_ref(x):
    """silu(a) * b, a and b the halves of the last dimension, in float64."""
    x = x.double()
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return a / (1 + torch.exp(-a)) * b


def _rope_ref(x, freq, interleaved=False, batch_first=False, mla=False):
    """Element by element from the definition, in float64: on the first R features,
    out = t * cos(f) + rot(t) * sin(f), rot pairing feature i with i + R/2 (halves)
    or 2k with 2k+1 (interleaved); MLA first orders t as (even features, odd features)."""
    x, freq = x.double(), freq.double()
    out = x.clone()
    R = freq.shape[-1]
    S = x.shape[1] if batch_first else x.shape[0]
    for s in range(S):
        xs = x[:, s] if batch_first else x[s]  # (B or S-other, H, D)
        t = xs[..., :R]
        if mla:
            t = torch.cat([t[..., 0::2], t[..., 1::2]], -1)
        rot = torch.empty_like(t)
        if interleaved:
            rot[..., 0::2], rot[..., 1::2] = -t[..., 1::2], t[..., 0::2]
        else:
            rot[..., : R // 2], rot[..., R // 2:] = -t[..., R // 2:], t[..., : R // 2]
        res = t * torch.cos(freq[s]) + rot * torch.sin(freq[s])
        if batch_first:
            out[:, s, :, :R] = res
        else:
            out[s, :, :, :R] = res
    return out


@pytest.mark.parametrize("shape", [(16, 32), (2, 5, 64), (1, 0, 12)])
@pytest.mark.parametrize("fn", [F.swish_glu, torch.swish_glu, torch.gated_silu, torch.nn.SwishGLU()])
def test_swish_glu_and_gated_silu_forward_backward(fn, shape):
    x = torch.randn(shape, dtype=torch.float32)
    xm = x.to("musa").requires_grad_()
    out = fn(xm)
    assert out.device.type == "musa" and out.dtype == torch.float32
    assert out.shape == (*shape[:-1], shape[-1] // 2)
    torch.testing.assert_close(out.cpu().double(), _silu_glu_ref(x), atol=1e-5, rtol=1e-5)
    g = torch.randn(out.shape)
    out.backward(g.to("musa"))
    xd = x.double().requires_grad_()
    _silu_glu_ref(xd).backward(g.double())
    torch.testing.assert_close(xm.grad.cpu().double(), xd.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_swish_glu_half_precision_keeps_dtype(dtype):
    x = torch.randn(8, 64)
    out = F.swish_glu(x.to(dtype).to("musa"))
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu().double(), _silu_glu_ref(x.to(dtype)), atol=2e-2, rtol=2e-2)


def test_gated_silu_float16_and_rejections():
    x = torch.randn(4, 32)
    out = torch.gated_silu(x.half().to("musa"))
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.cpu().double(), _silu_glu_ref(x.half()), atol=1e-2, rtol=1e-2)
    with pytest.raises(RuntimeError, match="only support fp32 / fp16"):
        torch.gated_silu(x.bfloat16().to("musa"))
    with pytest.raises(RuntimeError, match="greater than 1"):
        torch.gated_silu(torch.randn(8, device="musa"))


@pytest.mark.parametrize("call", [lambda x: F.swish_glu(x), lambda x: torch.gated_silu(x),
                                  lambda x: F.rope(x.reshape(1, 1, 1, -1), torch.zeros(1, 4))])
def test_cpu_inputs_are_rejected_as_upstream(call):
    with pytest.raises(RuntimeError, match="only supported in torch_musa"):
        call(torch.randn(2, 8))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("mla", [False, True])
@pytest.mark.parametrize("rot", [8, 6])
def test_rope_forward_backward(interleaved, batch_first, mla, rot):
    S, B, H, D = 5, 2, 3, 8
    x = torch.randn((B, S, H, D) if batch_first else (S, B, H, D))
    freq = torch.randn(S, rot)
    xm = x.to("musa").requires_grad_()
    out = F.rope(xm, freq.to("musa"), rotary_interleaved=interleaved, batch_first=batch_first,
                 multi_latent_attention=mla)
    ref = _rope_ref(x, freq, interleaved, batch_first, mla)
    torch.testing.assert_close(out.cpu().double(), ref, atol=1e-5, rtol=1e-5)
    g = torch.randn(x.shape)
    out.backward(g.to("musa"))
    xd = x.double().requires_grad_()
    _rope_ref(xd, freq, interleaved, batch_first, mla).backward(g.double())
    torch.testing.assert_close(xm.grad.cpu().double(), xd.grad, atol=1e-5, rtol=1e-5)


def test_rope_module_torch_rope_and_non_contiguous_input():
    S, B, H, D = 6, 2, 4, 8
    qkv = torch.randn(S, B, 3, H, D)
    x = qkv[:, :, 0]  # a non-contiguous view, as a merged qkv projection gives
    freq = torch.randn(S, D)
    ref = _rope_ref(x, freq)
    m = torch.nn.RoPE(freq_cis=freq, rotary_interleaved=False, batch_first=False).musa()
    assert "freq_cis" in dict(m.named_buffers()) and m.freq_cis.device.type == "musa"
    torch.testing.assert_close(m(qkv.to("musa")[:, :, 0]).cpu().double(), ref, atol=1e-5, rtol=1e-5)
    out = torch.rope(x.to("musa"), freq.to("musa"), False, False)
    torch.testing.assert_close(out.cpu().double(), ref, atol=1e-5, rtol=1e-5)


def test_rope_with_pairwise_angles_is_a_rotation():
    x = torch.randn(4, 2, 3, 8)
    angles = torch.randn(4, 4)
    out = F.rope(x.to("musa"), torch.cat([angles, angles], -1).to("musa"))
    assert math.isclose(out.cpu().double().norm().item(), x.double().norm().item(), rel_tol=1e-5)


def test_rope_freq_cis_gets_no_gradient():
    x = torch.randn(3, 1, 1, 4, device="musa", requires_grad=True)
    freq = torch.randn(3, 4, device="musa", requires_grad=True)
    F.rope(x, freq).sum().backward()
    assert x.grad is not None and freq.grad is None

"""The real torch_musa's pt2e quantized ops on musa: ``quantized::conv``, ``conv_binary`` and
``linear_per_tensor`` take integer tensors with their scales and zero points (weights
per output channel) and return uint8/int8 quantized with the output's, or a float result.

Reference: the definition in float64 on the CPU (dequantize, op, post op, round half to
even, clamp); musa computes in float32, so a value may round one step apart. PyTorch's
onednn CPU kernels of the same signature agree within one step too.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_musa  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:.*musa operator registry")

RANGES = {torch.uint8: (0, 255), torch.int8: (-128, 127)}
POST = {"none": lambda y: y, "relu": torch.relu, "swish": F.silu, "hardswish": F.hardswish,
        "hardtanh": lambda y: y.clamp(-2.0, 3.0), "tanh": torch.tanh, "gelu": F.gelu}
SCALARS = {"hardtanh": [-2.0, 3.0]}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _ints(shape, dtype, seed):
    lo, hi = RANGES[dtype]
    return torch.randint(lo, hi + 1, shape, dtype=dtype, generator=_gen(seed))


def _requantize(y, scale, zp, dtype):
    if dtype not in RANGES:
        return y.to(dtype)
    return torch.round(y / scale + zp).clamp(*RANGES[dtype]).to(dtype)


def _assert_within_one_step(out, ref):
    assert out.device.type == "musa" and out.dtype == ref.dtype and out.shape == ref.shape
    if ref.dtype in RANGES:
        diff = (out.cpu().int() - ref.int()).abs()
        assert diff.max() <= 1 and (diff == 0).float().mean() > 0.95
        assert ref.unique().numel() > 5  # not all clamped to one value
    else:
        torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-4)


def _conv_case(act_dtype, seed, cout=4, cin=3, groups=1):
    qx = _ints((2, cin, 7, 7), act_dtype, seed)
    qw = _ints((cout, cin // groups, 3, 3), torch.int8, seed + 1)
    w_scale = torch.rand(cout, generator=_gen(seed + 2)) * 0.02 + 0.005
    w_zp = torch.zeros(cout, dtype=torch.long)
    bias = torch.randn(cout, generator=_gen(seed + 3))
    return qx, qw, w_scale, w_zp, bias


def _conv_reference(qx, x_scale, x_zp, qw, w_scale, w_zp, bias, stride, padding, dilation, groups):
    x = (qx.double() - x_zp) * x_scale
    w = (qw.double() - w_zp.double().view(-1, 1, 1, 1)) * w_scale.double().view(-1, 1, 1, 1)
    return F.conv2d(x, w, bias.double(), stride, padding, dilation, groups)


@pytest.mark.parametrize("act_dtype, x_zp", [(torch.uint8, 128), (torch.int8, 0)])
@pytest.mark.parametrize("attr", sorted(set(POST) - {"tanh", "gelu"}))
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_conv_matches_the_definition(act_dtype, x_zp, attr, out_dtype):
    qx, qw, w_scale, w_zp, bias = _conv_case(act_dtype, seed=1)
    geometry = ([2, 1], [1, 1], [1, 1], 1)
    out = torch.ops.quantized.conv(qx.musa(), 0.05, x_zp, qw.musa(), w_scale.musa(), w_zp.musa(), bias.musa(),
                                   *geometry, 0.04, x_zp, out_dtype, attr, SCALARS.get(attr, []), "")
    y = POST[attr](_conv_reference(qx, 0.05, x_zp, qw, w_scale, w_zp, bias, *geometry))
    _assert_within_one_step(out, _requantize(y, 0.04, x_zp, out_dtype or act_dtype).to(out_dtype or act_dtype))


@pytest.mark.parametrize("out_dtype", [torch.uint8, torch.int8, torch.float32])
@pytest.mark.parametrize("unary", ["none", "relu"])
def test_conv_binary_adds_the_accumulator(out_dtype, unary):
    qx, qw, w_scale, w_zp, bias = _conv_case(torch.uint8, seed=4, cout=6, cin=4, groups=2)
    geometry = ([1, 1], [0, 0], [1, 1], 2)
    accum_scale = 1.0 if out_dtype == torch.float32 else 0.03
    qaccum = _ints((2, 6, 5, 5), torch.uint8 if out_dtype == torch.float32 else out_dtype, seed=5)
    out = torch.ops.quantized.conv_binary(
        qx.musa(), 0.05, 100, qw.musa(), w_scale.musa(), w_zp.musa(), qaccum.musa(), bias.musa(), *geometry,
        0.06, 10, out_dtype, accum_scale, 3, "sum", 0.5, unary, [], "")
    accum = (qaccum.double() - 3) * accum_scale
    y = POST[unary](_conv_reference(qx, 0.05, 100, qw, w_scale, w_zp, bias, *geometry) + 0.5 * accum)
    _assert_within_one_step(out, _requantize(y, 0.06, 10, out_dtype))


@pytest.mark.parametrize("shape", [(6, 16), (2, 3, 16)])
@pytest.mark.parametrize("post", ["none", "relu", "tanh", "gelu", "hardtanh"])
@pytest.mark.parametrize("out_dtype", [torch.uint8, torch.float32])
def test_linear_per_tensor_matches_the_definition(shape, post, out_dtype):
    qx = _ints(shape, torch.uint8, seed=6)
    qw = _ints((16, 12), torch.int8, seed=7)  # (K, N), as the real package's test passes it
    w_scale = torch.rand(12, generator=_gen(8)) * 0.02 + 0.005
    w_zp = torch.zeros(12, dtype=torch.long)
    bias = torch.randn(12, generator=_gen(9))
    out = torch.ops.quantized.linear_per_tensor(qx.musa(), 0.02, 128, qw.musa(), w_scale.musa(), w_zp.musa(),
                                                bias.musa(), 0.03, 128, out_dtype, post, SCALARS.get(post, []),
                                                "none")
    y = ((qx.double() - 128) * 0.02) @ (qw.double() * w_scale.double()) + bias.double()
    _assert_within_one_step(out, _requantize(POST[post](y), 0.03, 128, out_dtype))


@pytest.mark.parametrize("attr", ["none", "relu", "hardswish"])
def test_conv_agrees_with_pytorchs_onednn_kernel(attr):
    qx, qw, w_scale, w_zp, bias = _conv_case(torch.uint8, seed=10, cout=8, cin=4)
    args = (0.05, 128)
    rest = (w_scale, w_zp, bias, [1, 1], [1, 1], [1, 1], 1, 0.05, 128, torch.uint8, attr, [], "")
    cpu = torch.ops.onednn.qconv2d_pointwise(qx, *args, qw.to_mkldnn(), *rest)
    out = torch.ops.quantized.conv(qx.musa(), *args, qw.musa(), *(r.musa() if isinstance(r, torch.Tensor) else r
                                                                  for r in rest))
    _assert_within_one_step(out, cpu)


def test_bad_arguments_name_what_is_allowed():
    qx, qw, w_scale, w_zp, bias = _conv_case(torch.uint8, seed=11)
    args = [qx.musa(), 0.05, 128, qw.musa(), w_scale.musa(), w_zp.musa(), bias.musa(), [1, 1], [0, 0], [1, 1], 1,
            0.05, 128, None, "mish", [], ""]
    with pytest.raises(RuntimeError, match=r"quantized::conv: unsupported post op 'mish'; supported: \[.*'relu'"):
        torch.ops.quantized.conv(*args)
    args[0], args[14] = qx.float().musa(), "none"
    with pytest.raises(RuntimeError, match=r"quantized::conv: qx must be an integer tensor .*got torch.float32"):
        torch.ops.quantized.conv(*args)
    with pytest.raises(RuntimeError, match=r"expected qx \(\.\.\., K\) with at least 2 dims and qw \(K, N\)"):
        torch.ops.quantized.linear_per_tensor(_ints((2, 5), torch.uint8, 1).musa(), 0.1, 0,
                                              _ints((4, 3), torch.int8, 2).musa(), torch.ones(3, device="musa"),
                                              torch.zeros(3, dtype=torch.long, device="musa"), None, 0.1, 0, None,
                                              "none", [], "")

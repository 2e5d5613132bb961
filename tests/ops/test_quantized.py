"""Quantized musa tensors through the host kernels, compared with the CPU device."""
import pytest
import torch

# Moving quantized tensors and per-channel quantization matched the CPU on the H200 too.
HOST = pytest.mark.requires_host_driver("the host kernels quantize bit for bit as the CPU device")
pytestmark = pytest.mark.filterwarnings("ignore:.*musa operator registry")


def _x():
    return torch.randn(4, 5, generator=torch.Generator().manual_seed(0)) * 3


@HOST
@pytest.mark.parametrize("dtype", [torch.quint8, torch.qint8, torch.qint32])
def test_quantize_dequantize_round_trip(dtype):
    x = _x()
    q = torch.quantize_per_tensor(x, 0.05, 3 if dtype == torch.quint8 else 0, dtype)
    qm = torch.quantize_per_tensor(x.musa(), 0.05, 3 if dtype == torch.quint8 else 0, dtype)
    assert qm.device.type == "musa" and qm.is_quantized and qm.dtype == dtype
    assert qm.q_scale() == q.q_scale() and qm.q_zero_point() == q.q_zero_point()
    assert torch.equal(qm.int_repr().cpu(), q.int_repr())
    d = qm.dequantize()
    assert d.device.type == "musa" and torch.equal(d.cpu(), q.dequantize())


def test_to_musa_and_back():
    q = torch.quantize_per_tensor(_x(), 0.1, 10, torch.quint8)
    qm = q.to("musa")
    assert qm.device.type == "musa" and qm.is_quantized
    back = qm.cpu()
    assert back.is_quantized and torch.equal(back.int_repr(), q.int_repr())
    assert back.q_scale() == q.q_scale() and back.q_zero_point() == q.q_zero_point()


def test_per_channel():
    x = _x()
    scales, zps = torch.tensor([0.1, 0.2, 0.05, 0.3]), torch.tensor([0, 1, 2, 3])
    q = torch.quantize_per_channel(x, scales, zps, 0, torch.quint8)
    qm = torch.quantize_per_channel(x.musa(), scales.musa(), zps.musa(), 0, torch.quint8)
    assert torch.equal(qm.int_repr().cpu(), q.int_repr())
    assert torch.equal(qm.dequantize().cpu(), q.dequantize())
    assert torch.equal(q.to("musa").dequantize().cpu(), q.dequantize())


@HOST
def test_quantized_ops():
    a = torch.quantize_per_tensor(_x(), 0.1, 10, torch.quint8)
    am = a.musa()
    for f in (torch.relu, lambda t: t[1:3], lambda t: t.reshape(5, 4), lambda t: t.transpose(0, 1),
              lambda t: torch.ops.quantized.add(t, t, 0.2, 5)):
        r, rm = f(a), f(am)
        assert rm.device.type == "musa" and rm.is_quantized
        assert torch.equal(rm.int_repr().cpu(), r.int_repr())
        assert rm.q_scale() == r.q_scale() and rm.q_zero_point() == r.q_zero_point()
    assert torch.equal(torch.nn.quantized.functional.max_pool2d(am[None, None], 2).dequantize().cpu(),
                       torch.nn.quantized.functional.max_pool2d(a[None, None], 2).dequantize())


@HOST
def test_quantized_modules_and_layouts():
    q = torch.quantize_per_tensor(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1)),
                                  0.05, 64, torch.quint8)
    qm = q.musa()
    for f in (lambda t: torch.cat([t, t]), lambda t: torch.nn.quantized.functional.avg_pool2d(t, 2),
              lambda t: torch.nn.quantized.functional.interpolate(t, scale_factor=2),
              lambda t: t.contiguous(memory_format=torch.channels_last), torch.clone):
        assert torch.equal(f(qm).int_repr().cpu(), f(q).int_repr())
    from torch.ao.nn.quantized import Conv2d
    conv = Conv2d(3, 4, 3)
    conv.set_weight_bias(torch.quantize_per_tensor(torch.randn(4, 3, 3, 3), 0.05, 0, torch.qint8), None)
    conv.scale, conv.zero_point = 0.1, 0
    out = conv(qm)
    # musa's quantized conv is dequantize -> conv -> quantize (tests/ops/test_quantized_conv.py);
    # the CPU engine's integer kernel rounds its accumulator otherwise, by at most one step
    diff = out.int_repr().cpu().int() - conv(q).int_repr().int()
    assert out.device.type == "musa" and diff.abs().max() <= 1

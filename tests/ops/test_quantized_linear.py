"""Quantized linear on musa (torch_musa.ops.quantized): QInt8 activations as the real
torch_musa takes them, QUInt8 too, with the fused ReLU/tanh/leaky ReLU variants.

The reference is the definition on the CPU: dequantize, float linear, activation,
quantize_per_tensor; the host driver runs the same CPU kernels: bit for bit.
"""
import pytest
import torch
import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq
import torch.nn.functional as F

import torch_musa  # noqa: F401

# the GPU's integer kernels meet the definition bit for bit on some shapes, not all
HOST = pytest.mark.requires_host_driver("the host driver runs the reference's CPU kernels: bit for bit",
                                        may_pass_elsewhere=True)
pytestmark = pytest.mark.filterwarnings("ignore:.*musa operator registry", "ignore:.*deprecated")

ZERO_POINT = {torch.qint8: 0, torch.quint8: 128}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _quantize(x, dtype):
    return torch.quantize_per_tensor(x, float(x.abs().max()) / 127, ZERO_POINT[dtype], dtype)


def _weights(k, n, bias, seed):
    w = torch.randn(n, k, generator=_gen(seed))
    qw = torch.quantize_per_tensor(w, float(w.abs().max()) / 127, 0, torch.qint8)
    return qw, (torch.randn(n, generator=_gen(seed + 1)) if bias else None)


def _assert_same(out, ref):
    assert out.device.type == "musa" and out.is_quantized and out.dtype == ref.dtype
    assert out.q_scale() == ref.q_scale() and out.q_zero_point() == ref.q_zero_point()
    assert torch.equal(out.int_repr().cpu(), ref.int_repr())


@HOST
@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint8])
@pytest.mark.parametrize("shape", [(8, 32), (4, 3, 32)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cls, post", [(nnq.Linear, lambda y: y), (nniq.LinearReLU, torch.relu)])
def test_linear_matches_the_definition(dtype, shape, bias, cls, post):
    qw, b = _weights(32, 16, bias, seed=1)
    m = cls(32, 16, bias_=bias) if cls is nnq.Linear else cls(32, 16, bias=bias)
    m.set_weight_bias(qw.musa(), None if b is None else b.musa())
    m.scale, m.zero_point = 0.08, ZERO_POINT[dtype]
    qx = _quantize(torch.randn(*shape, generator=_gen(3)), dtype)
    ref = torch.quantize_per_tensor(post(F.linear(qx.dequantize(), qw.dequantize(), b)), 0.08,
                                    ZERO_POINT[dtype], dtype)
    _assert_same(m(qx.musa()), ref)
    assert ref.int_repr().unique().numel() > 10


@HOST
@pytest.mark.parametrize("op, post, extra", [
    ("linear_tanh", torch.tanh, ()), ("linear_leaky_relu", lambda y: F.leaky_relu(y, 0.2), (0.2,))])
def test_linear_tanh_and_leaky_relu(op, post, extra):
    qw, b = _weights(16, 8, True, seed=4)
    packed = torch.ops.quantized.linear_prepack(qw.musa(), b.musa())
    qx = _quantize(torch.randn(5, 16, generator=_gen(6)), torch.qint8)
    out = getattr(torch.ops.quantized, op)(qx.musa(), packed, 0.02, 0, *extra)
    ref = torch.quantize_per_tensor(post(F.linear(qx.dequantize(), qw.dequantize(), b)), 0.02, 0, torch.qint8)
    _assert_same(out, ref)


def test_within_one_step_of_the_cpu_engine():
    qw, b = _weights(64, 32, True, seed=7)
    m = nnq.Linear(64, 32)
    m.set_weight_bias(qw.musa(), b.musa())
    m.scale, m.zero_point = 0.1, 128
    cpu = nnq.Linear(64, 32)
    cpu.set_weight_bias(qw, b)
    cpu.scale, cpu.zero_point = 0.1, 128
    qx = _quantize(torch.randn(16, 64, generator=_gen(8)), torch.quint8)
    diff = m(qx.musa()).int_repr().cpu().int() - cpu(qx).int_repr().int()
    assert diff.abs().max() <= 1


def test_float_input_is_refused():
    qw, _ = _weights(4, 3, False, seed=9)
    packed = torch.ops.quantized.linear_prepack(qw.musa(), None)
    with pytest.raises(RuntimeError, match=r"quantized::linear: the input must be a per-tensor quantized tensor "
                                           r"of dtype torch.qint8 or torch.quint8, got torch.float32"):
        torch.ops.quantized.linear(torch.randn(2, 4, device="musa"), packed, 0.1, 0)

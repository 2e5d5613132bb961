"""Quantized convolution on musa (torch_musa.ops.quantized): QInt8 activations as the real
torch_musa takes them, QUInt8 too, the fused ReLU/SiLU/add variants, no engine needed.

The reference is the definition on the CPU: dequantize, float convolution (+ accumulator),
activation, quantize_per_tensor. The host driver runs the same CPU kernels: bit for bit.
"""
import pytest
import torch
import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq
import torch.nn.functional as F

import torch_musa  # noqa: F401

HOST = pytest.mark.requires_host_driver("the host driver runs the reference's CPU kernels: bit for bit")
# cuDNN's integer kernels meet the definition bit for bit on some geometries, not all.
BITS = pytest.mark.requires_host_driver("the host driver runs the reference's CPU kernels: bit for bit",
                                        may_pass_elsewhere=True)
pytestmark = pytest.mark.filterwarnings("ignore:.*musa operator registry", "ignore:.*deprecated")

# activation dtype -> zero point (the real package's tests: qint8 symmetric, quint8 at 128)
ZERO_POINT = {torch.qint8: 0, torch.quint8: 128}
POST = {"none": lambda y: y, "relu": torch.relu, "silu": F.silu}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _quantize(x, dtype, zp=None):
    return torch.quantize_per_tensor(x, float(x.abs().max()) / 127, ZERO_POINT[dtype] if zp is None else zp, dtype)


def _module(cls, cin, cout, k, seed, **kw):
    weight = torch.randn(cout, cin // kw.get("groups", 1), *k, generator=_gen(seed))
    bias = torch.randn(cout, generator=_gen(seed + 1)) if kw.pop("bias", True) else None
    m = cls(cin, cout, k, **kw)
    m.set_weight_bias(torch.quantize_per_tensor(weight, float(weight.abs().max()) / 127, 0, torch.qint8).musa(),
                      None if bias is None else bias.musa())
    return m


def _reference(m, qx, post, qaccum=None):
    """Dequantize -> conv -> (+ accum) -> post -> quantize, on the CPU."""
    w, b = m._weight_bias()
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[qx.dim()]
    y = conv(qx.dequantize(), w.dequantize().cpu(), None if b is None else b.cpu(), m.stride, m.padding,
             m.dilation, m.groups)
    if qaccum is not None:
        y = y + qaccum.dequantize()
    return torch.quantize_per_tensor(POST[post](y), m.scale, m.zero_point, qx.dtype)


def _assert_same(out, ref):
    assert out.device.type == "musa" and out.is_quantized and out.dtype == ref.dtype
    assert out.q_scale() == ref.q_scale() and out.q_zero_point() == ref.q_zero_point()
    assert torch.equal(out.int_repr().cpu(), ref.int_repr())


GEOMETRY = [dict(stride=1, padding=1), dict(stride=2, padding=1, bias=False), dict(stride=1, padding=0, groups=2),
            dict(stride=1, padding=2, dilation=2)]


@BITS
@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint8])
@pytest.mark.parametrize("cls, post", [(nnq.Conv2d, "none"), (nniq.ConvReLU2d, "relu"),
                                       (nniq.ConvSiLU2d, "silu")])
@pytest.mark.parametrize("geometry", GEOMETRY)
def test_conv2d_matches_the_definition(dtype, cls, post, geometry):
    m = _module(cls, 4, 6, (3, 3), seed=1, **geometry)
    qx = _quantize(torch.randn(2, 4, 9, 9, generator=_gen(2)), dtype)
    m.scale, m.zero_point = 0.05, ZERO_POINT[dtype]
    ref = _reference(m, qx, post)
    _assert_same(m(qx.musa()), ref)
    assert ref.int_repr().unique().numel() > 10  # the output spans the range, not one clamped value


@HOST
@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint8])
@pytest.mark.parametrize("cls, post", [(nniq.ConvAdd2d, "none"), (nniq.ConvAddReLU2d, "relu"),
                                       (nniq.ConvAddSiLU2d, "silu")])
def test_conv2d_add_needs_no_engine(dtype, cls, post):
    """quantized::conv2d_add* run whatever torch.backends.quantized.engine says (the CPU's
    need onednn), with the accumulator in its own scale."""
    m = _module(cls, 3, 8, (3, 3), seed=3, stride=2, padding=1)
    qx = _quantize(torch.randn(2, 3, 8, 8, generator=_gen(4)), dtype)
    accum = torch.randn(2, 4, 4, 8, generator=_gen(5)).permute(0, 3, 1, 2)  # channels-last, as upstream's
    qaccum = _quantize(accum, dtype)
    m.scale, m.zero_point = 0.08, ZERO_POINT[dtype]
    assert torch.backends.quantized.engine != "onednn"
    _assert_same(m(qx.musa(), qaccum.musa()), _reference(m, qx, post, qaccum))


@BITS
@pytest.mark.parametrize("cls, post, shape, k", [
    (nnq.Conv1d, "none", (2, 4, 11), (3,)), (nniq.ConvReLU1d, "relu", (2, 4, 11), (3,)),
    (nnq.Conv3d, "none", (1, 4, 5, 6, 6), (3, 3, 3)), (nniq.ConvReLU3d, "relu", (1, 4, 5, 6, 6), (3, 3, 3))])
def test_conv1d_and_conv3d(cls, post, shape, k):
    m = _module(cls, 4, 5, k, seed=6, stride=1, padding=1)
    qx = _quantize(torch.randn(*shape, generator=_gen(7)), torch.qint8)
    m.scale, m.zero_point = 0.05, 0
    _assert_same(m(qx.musa()), _reference(m, qx, post))


def test_within_one_step_of_the_cpu_engine():
    """Where PyTorch's CPU engine computes it (QUInt8), its integer kernel and the definition
    round differently by at most one step."""
    m = _module(nnq.Conv2d, 8, 16, (3, 3), seed=8, padding=1)
    m.scale, m.zero_point = 0.1, 128
    qx = _quantize(torch.randn(2, 8, 10, 10, generator=_gen(9)), torch.quint8)
    cpu = nnq.Conv2d(8, 16, 3, padding=1)
    cpu.set_weight_bias(*(t.cpu() if t is not None else None for t in m._weight_bias()))
    cpu.scale, cpu.zero_point = m.scale, m.zero_point
    diff = m(qx.musa()).int_repr().cpu().int() - cpu(qx).int_repr().int()
    assert diff.abs().max() <= 1


@pytest.mark.requires_host_driver(
    "PyTorch's CUDA prepack (cuDNN) takes per-tensor weights only; a per-channel musa tensor's "
    "CPU scales read on the GPU were an illegal address", unsafe_elsewhere=True)
def test_per_channel_weights():
    weight = torch.randn(6, 4, 3, 3, generator=_gen(10))
    scales = weight.abs().amax(dim=(1, 2, 3)) / 127
    qw = torch.quantize_per_channel(weight, scales, torch.zeros(6, dtype=torch.long), 0, torch.qint8)
    m = nnq.Conv2d(4, 6, 3)
    m.set_weight_bias(qw.musa(), None)
    m.scale, m.zero_point = 0.05, 0
    qx = _quantize(torch.randn(1, 4, 7, 7, generator=_gen(11)), torch.qint8)
    ref = torch.quantize_per_tensor(F.conv2d(qx.dequantize(), qw.dequantize()), 0.05, 0, torch.qint8)
    diff = m(qx.musa()).int_repr().cpu().int() - ref.int_repr().int()
    assert diff.abs().max() <= (0 if torch_musa._driver.NAME == "host" else 1)


def test_bad_inputs_name_what_is_allowed():
    m = _module(nnq.Conv2d, 4, 6, (3, 3), seed=12)
    with pytest.raises(RuntimeError, match=r"quantized::conv2d: the input must be a per-tensor quantized tensor "
                                           r"of dtype torch.qint8 or torch.quint8, got quantized torch.qint32"):
        torch.ops.quantized.conv2d.new(torch.quantize_per_tensor(torch.randn(1, 4, 5, 5), 0.1, 0, torch.qint32)
                                       .musa(), m._packed_params, 0.1, 0)
    qx = _quantize(torch.randn(1, 4, 5, 5), torch.qint8).musa()
    add = _module(nniq.ConvAdd2d, 4, 6, (3, 3), seed=13)
    with pytest.raises(RuntimeError, match=r"qaccum has shape \(1, 6, 2, 2\), the convolution's output \(1, 6, 3, 3\)"):
        add(qx, _quantize(torch.randn(1, 6, 2, 2), torch.qint8).musa())
    with pytest.raises(ValueError, match="Input shape must be"):
        _module(nniq.ConvSiLU2d, 4, 6, (3, 3), seed=14)(qx[0])


def test_fused_modules_convert_from_float():
    """A float ConvSiLU2d / ConvAddSiLU2d with a qconfig and an observed output converts as
    PyTorch's ReLU fusions do (its conv's weight observed, the output's qparams kept)."""
    from torch.ao.quantization import get_default_qconfig
    from torch.ao.quantization.observer import MinMaxObserver

    torch.manual_seed(0)
    for fused_cls, args in ((torch.ao.nn.intrinsic.ConvSiLU2d, (torch.nn.SiLU(),)),
                            (torch.ao.nn.intrinsic.ConvAddSiLU2d, (torch.add, torch.nn.SiLU()))):
        fused = fused_cls(torch.nn.Conv2d(3, 4, 3), *args)
        fused.qconfig = fused[0].qconfig = get_default_qconfig("x86")  # as prepare() propagates it
        fused.activation_post_process = MinMaxObserver()
        fused.activation_post_process(torch.randn(8) * 3)
        q = getattr(torch.ao.nn.intrinsic.quantized, fused_cls.__name__).from_float(fused)
        scale, zp = fused.activation_post_process.calculate_qparams()
        assert q.scale == float(scale) and q.zero_point == int(zp)
        step = float(fused[0].weight.abs().max()) / 127  # the largest per-channel scale
        assert torch.allclose(q.weight().dequantize(), fused[0].weight.detach(), atol=step)
        assert q._get_name() == "Quantized" + fused_cls.__name__


def test_qat_conv_bn_silu_trains_and_converts():
    from torch.ao.quantization import get_default_qat_qconfig

    qat = torch.ao.nn.intrinsic.qat.ConvBnSiLU2d(3, 4, 3, qconfig=get_default_qat_qconfig("x86"))
    x = torch.randn(2, 3, 6, 6)
    out = qat(x)
    assert out.shape == (2, 4, 4, 4) and (out >= -0.279).all()  # SiLU's minimum is about -0.278
    float_module = qat.to_float()
    assert type(float_module) is torch.ao.nn.intrinsic.ConvSiLU2d
    assert isinstance(float_module[1], torch.nn.SiLU)


@pytest.mark.slow  # FX prepare/convert: several seconds
def test_fx_lowers_conv_silu_to_the_quantized_module():
    """With a backend config that fuses Conv2d + SiLU (as the real package's users write),
    convert_fx gives the quantized ConvSiLU2d, which runs on musa."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.backend_config import (BackendPatternConfig, DTypeConfig, ObservationType,
                                                      get_native_backend_config)
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    from torch.ao.nn.quantized import reference as nnqr

    nni = torch.ao.nn.intrinsic
    dtypes = [DTypeConfig(input_dtype=torch.quint8, output_dtype=torch.quint8, weight_dtype=torch.qint8,
                          bias_dtype=torch.float)]
    config = get_native_backend_config()
    config.set_backend_pattern_config(
        BackendPatternConfig((torch.nn.Conv2d, torch.nn.SiLU)).set_dtype_configs(dtypes)
        .set_fuser_method(lambda is_qat, conv, silu: nni.ConvSiLU2d(conv, silu)).set_fused_module(nni.ConvSiLU2d))
    config.set_backend_pattern_config(
        BackendPatternConfig(nni.ConvSiLU2d).set_dtype_configs(dtypes)
        .set_observation_type(ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT)
        .set_root_module(torch.nn.Conv2d).set_reference_quantized_module(nnqr.Conv2d)
        .set_fused_module(nni.ConvSiLU2d))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.SiLU()).eval()
    x = torch.randn(2, 3, 8, 8)
    prepared = prepare_fx(model, get_default_qconfig_mapping("x86"), (x,), backend_config=config)
    prepared(x)
    quantized = convert_fx(prepared, backend_config=config)
    fused = [m for m in quantized.modules() if isinstance(m, nniq.ConvSiLU2d)]
    assert len(fused) == 1
    out = quantized.to("musa")(x.musa())
    step = fused[0].scale
    assert out.device.type == "musa" and (out.cpu() - model(x)).abs().max() <= 2 * step


def test_cudnn_padded_filters_are_trimmed_to_the_accumulators_channels():
    """The cuda driver's prepack (cuDNN) pads 6 filters to 8 with zeros; conv_add trims them
    back by the accumulator's channels, and keeps a weight whose extra filters are real."""
    from torch_musa.ops.quantized import _unpadded
    w = torch.quantize_per_tensor(torch.randn(6, 4, 3, 3, generator=_gen(20)), 0.05, 3, torch.quint8)
    padded = torch.cat([w, torch.quantize_per_tensor(torch.zeros(2, 4, 3, 3), 0.05, 3, torch.quint8)])
    bias = torch.cat([torch.randn(6, generator=_gen(21)), torch.zeros(2)])
    trimmed, b = _unpadded(padded, bias, 6)
    assert torch.equal(trimmed.int_repr(), w.int_repr()) and b.shape == (6,)
    assert _unpadded(padded, None, 6)[0].shape[0] == 6
    assert _unpadded(padded, bias + 1, 6)[0].shape[0] == 8  # a non-zero bias: real filters
    real = torch.quantize_per_tensor(torch.randn(8, 4, 3, 3, generator=_gen(22)), 0.05, 3, torch.quint8)
    assert _unpadded(real, None, 6)[0].shape[0] == 8

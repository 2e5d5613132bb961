"""uint8 bilinear/bicubic interpolation is refused on musa, as CUDA refuses it.

PyTorch's test_nn.py (test_upsamplingBiMode2d_nonsupported_dtypes) expects every
accelerator to refuse it; the host driver ran the CPU's kernel and accepted it, so
code that worked there broke on a card.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_musa  # noqa: F401
from torch_musa.ops import gpu_dtype_limits


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [False, True])
def test_uint8_interpolation_is_refused_with_the_op_and_dtype(mode, antialias):
    x = torch.ones(1, 3, 8, 8, dtype=torch.uint8)
    F.interpolate(x, size=(5, 5), mode=mode, antialias=antialias)  # the CPU takes it
    with pytest.raises(RuntimeError, match=r"not implemented for 'Byte'"):
        F.interpolate(x.to("musa"), size=(5, 5), mode=mode, antialias=antialias)
    # the process stays usable: the float path right after
    y = F.interpolate(x.float().to("musa"), size=(5, 5), mode=mode, antialias=antialias)
    assert y.shape == (1, 3, 5, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_other_dtypes_match_the_cpu_values_and_layout(dtype, mode, memory_format):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 9, generator=g).contiguous(memory_format=memory_format)
    ref = F.interpolate(x, scale_factor=1.7, mode=mode, align_corners=False)
    out = F.interpolate(x.to(dtype).to("musa").contiguous(memory_format=memory_format),
                        scale_factor=1.7, mode=mode, align_corners=False)
    assert out.dtype == dtype and out.stride() == ref.stride()
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.cpu().float(), ref, **tol)


def test_the_refused_ops_are_the_interpolations():
    assert set(gpu_dtype_limits.REFUSED) == {"upsample_bilinear2d", "upsample_bicubic2d",
                                             "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa"}

"""ops/int_histc.py: integer ``histc`` as CUDA computes it (the CPU's kernel has none);
floating histc stays the CPU's kernel."""
from __future__ import annotations

import pytest
import torch

E, TOP_K = 6, 2


def test_integer_histc_counts_tokens_per_expert():
    """transformers' grouped-mm experts (Mixtral, Qwen2-MoE, ... default on every device
    but CPU/MPS) count tokens per expert with histc over int32 expert ids, as CUDA
    allows; musa sent it to the CPU kernel, which raised '"histogram_cpu" not
    implemented for 'Int''."""
    ids = torch.randint(0, E, (40, TOP_K), generator=torch.Generator().manual_seed(0))
    sorted_ids, _ = torch.sort(ids.reshape(-1).to("musa"))
    counts = torch.histc(sorted_ids.int(), bins=E, min=0, max=E - 1)
    assert counts.dtype == torch.int32 and counts.device.type == "musa"
    want = torch.bincount(ids.reshape(-1), minlength=E)
    assert torch.equal(counts.cpu().long(), want)
    # The CPU run's form of the same line (float ids) gives the same counts.
    assert torch.equal(torch.histc(sorted_ids.cpu().float(), bins=E, min=0, max=E - 1).long(), want)
    offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
    assert offsets[-1].item() == ids.numel()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_histc_follows_cuda(dtype):
    """CUDA's integer histc: int64 bin arithmetic, max in the last bin, values outside
    [min, max] dropped, min == max takes the data's range (widened by one if constant),
    the input's dtype out; out= resizes."""
    x = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 9, 12], dtype=dtype, device="musa")
    # bin = (v - 2) * 3 // (7 - 2): 2, 3 -> 0; 4, 5 -> 1; 6 -> 2; 7 -> 3, the last bin
    assert torch.histc(x, bins=3, min=2, max=7).tolist() == [2, 2, 2]
    assert torch.histc(x, bins=4, min=0, max=0).tolist() == [3, 3, 2, 2]  # v // 3 over 0..12
    assert torch.histc(x, bins=2, min=0.4, max=0.9).tolist() == [6, 4]  # bounds truncate to 0, 0
    assert torch.histc(torch.full((5,), 3, dtype=dtype, device="musa"), bins=4).tolist() == [0, 0, 5, 0]
    assert torch.histc(x, bins=3).dtype == dtype
    out = torch.empty(0, dtype=dtype, device="musa")
    torch.histc(x, bins=3, min=2, max=7, out=out)
    assert out.tolist() == [2, 2, 2]
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(x, bins=0)


@pytest.mark.parametrize("dt", [
    torch.float32, torch.float64,
    pytest.param(torch.bfloat16, marks=pytest.mark.requires_host_driver(
        "CUDA's histc has no bfloat16 kernel (the cuda driver's is CUDA's); the CPU's has")),
])
def test_float_histc_is_still_the_cpu_kernel(dt):
    x = torch.randn(100, generator=torch.Generator().manual_seed(1))
    assert torch.equal(torch.histc(x.to(dt).to("musa"), bins=7).cpu(), torch.histc(x.to(dt), bins=7))
    assert torch.equal(torch.histc(x.to(dt).to("musa"), bins=5, min=-1, max=1).cpu(),
                       torch.histc(x.to(dt), bins=5, min=-1, max=1))

"""Patterns from Hugging Face architectures run from tiny configs on musa against the
CPU (Mixtral and Qwen2-MoE routing, Whisper, Bart beam search, DeBERTa-v2, CLIP,
Wav2Vec2), in plain torch: what failed, and the MoE layer that now trains like the CPU.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ._common import assert_same

E, TOP_K, HIDDEN = 6, 2, 16


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


class _MoE(nn.Module):
    """A top-k mixture of experts as transformers writes it: softmax router, topk,
    renormalised weights, experts as stacked parameters; ``grouped`` sorts the routed
    pairs and splits them by histc counts, otherwise one_hot/where/index_add_."""

    def __init__(self, grouped: bool):
        super().__init__()
        self.grouped = grouped
        self.gate = nn.Linear(HIDDEN, E, bias=False)
        self.up = nn.Parameter(torch.randn(E, 2 * 24, HIDDEN) * 0.1)
        self.down = nn.Parameter(torch.randn(E, HIDDEN, 24) * 0.1)

    def _expert(self, e, h):
        gate, up = F.linear(h, self.up[e]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.down[e])

    def forward(self, x):
        h = x.reshape(-1, HIDDEN)
        probs = F.softmax(self.gate(h), dim=-1, dtype=torch.float)
        w, idx = torch.topk(probs, TOP_K, dim=-1)
        w = (w / w.sum(-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(h)
        if self.grouped:
            flat = idx.reshape(-1)
            sorted_ids, perm = torch.sort(flat)
            ids = sorted_ids.float() if h.device.type == "cpu" else sorted_ids.int()
            counts = torch.histc(ids, bins=E, min=0, max=E - 1).long().tolist()
            tokens = perm // TOP_K
            parts = torch.split(h[tokens], counts)
            ys = torch.cat([self._expert(e, p) for e, p in enumerate(parts)])
            out.index_add_(0, tokens, ys * w.reshape(-1)[perm, None])
        else:
            mask = F.one_hot(idx, num_classes=E).permute(2, 1, 0)
            for e in range(E):
                pos, tok = torch.where(mask[e])
                out.index_add_(0, tok, self._expert(e, h[tok]) * w[tok, pos, None])
        aux = E * (probs.mean(0) * F.one_hot(idx, E).float().sum(1).mean(0)).sum()
        return out.reshape(x.shape), aux


def _train(device, grouped):
    torch.manual_seed(0)
    model = _MoE(grouped).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    g = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(3):
        x = torch.randn(3, 7, HIDDEN, generator=g).to(device)
        y, aux = model(x)
        loss = (y - x.flip(-1)).pow(2).mean() + 0.01 * aux
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().cpu())
    return torch.stack(losses), {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("grouped", [False, True], ids=["one_hot_index_add", "sorted_histc"])
def test_moe_layer_trains_like_the_cpu(grouped):
    cpu_losses, cpu_params = _train("cpu", grouped)
    losses, params = _train("musa", grouped)
    assert_same(losses, cpu_losses, "losses")
    for name in cpu_params:
        assert_same(params[name], cpu_params[name], name)

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

"""Plain-torch forms of what PyTorch Lightning, skorch and torch-optimizer run on
musa (docs/REALCODE.md): the torch.musa calls a user's Lightning accelerator
makes, a LAMB trust ratio, a Shampoo preconditioner by SVD matrix power, and
Adahessian's Hutchinson Hessian estimate with Rademacher vectors from musa's
generator. Each was identical to the CPU in those runs; these keep it so.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from ._common import assert_same


def test_the_calls_a_lightning_accelerator_makes():
    """setup_device, get_device_stats (DeviceStatsMonitor logs these keys),
    auto_device_count, is_available, teardown."""
    assert torch.musa.is_available() and torch.musa.device_count() >= 1
    before = torch.musa.current_device()
    try:
        torch.musa.set_device(torch.device("musa", 0))
        x = torch.randn(256, 256, device="musa")
        stats = torch.musa.memory_stats(torch.device("musa", 0))
        assert stats["allocated_bytes.all.current"] >= x.numel() * 4
        for key in ("active.all.current", "reserved_bytes.all.peak", "num_alloc_retries"):
            assert key in stats
        assert torch.musa.memory_stats("musa:0").keys() == stats.keys()
        del x
        torch.musa.empty_cache()
    finally:
        torch.musa.set_device(before)


def _lamb_shampoo_steps(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 3)).to(device)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 12, generator=g).to(device)
    y = torch.randint(0, 3, (32,), generator=g).to(device)
    exp_avg = [torch.zeros_like(p) for p in model.parameters()]
    exp_sq = [torch.zeros_like(p) for p in model.parameters()]
    precond = [torch.eye(p.shape[0], device=device) * 1e-4 for p in model.parameters()]
    losses = []
    for step in range(1, 5):
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.detach())
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                grad = p.grad
                if i % 2 == 0:  # LAMB (torch_optimizer.Lamb)
                    exp_avg[i].mul_(0.9).add_(grad, alpha=0.1)
                    exp_sq[i].mul_(0.999).addcmul_(grad, grad, value=0.001)
                    adam_step = exp_avg[i] / exp_sq[i].sqrt().add(1e-6) + 0.01 * p
                    w_norm = torch.norm(p).clamp(0, 10)
                    a_norm = torch.norm(adam_step)
                    trust = 1 if w_norm == 0 or a_norm == 0 else w_norm / a_norm
                    p.add_(adam_step * trust, alpha=-1e-2)
                else:  # Shampoo's preconditioner of a bias: (G G^T)^(-1/2) by SVD
                    precond[i].add_(grad[:, None] @ grad[None, :])
                    u, s, v = torch.svd(precond[i])
                    root = u @ s.pow(-0.5).diag() @ v.t()
                    p.add_(root @ grad, alpha=-1e-2)
    return [l.cpu() for l in losses] + [t.detach().cpu() for t in model.parameters()]


def test_lamb_trust_ratio_and_shampoo_svd_root_match_the_cpu():
    for m, c in zip(_lamb_shampoo_steps("musa"), _lamb_shampoo_steps("cpu")):
        assert_same(m, c, "LAMB / Shampoo steps")


def _hutchinson(device):
    """Adahessian: z in {-1, 1} from the device's generator, Hz by double backward."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2)).to(device)
    if device != "cpu":  # musa's generator continues where the CPU's init left it
        torch.musa.set_rng_state(torch.get_rng_state())
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 8, generator=g).to(device)
    y = torch.randint(0, 2, (16,), generator=g).to(device)
    params = list(model.parameters())
    loss = nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    zs = [torch.randint_like(p, high=2) * 2.0 - 1.0 for p in params]
    hvs = torch.autograd.grad(grads, params, grad_outputs=zs)
    return [t.detach().cpu() for t in (*zs, *hvs, *(h * z for h, z in zip(hvs, zs)))]


@pytest.mark.requires_host_driver("compares musa's draws with the CPU generator's")
def test_hutchinson_hessian_estimate_matches_the_cpu():
    for m, c in zip(_hutchinson("musa"), _hutchinson("cpu")):
        assert_same(m, c, "Hutchinson Hessian diagonal")

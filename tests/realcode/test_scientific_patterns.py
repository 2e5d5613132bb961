"""Plain-torch forms of what torch_geometric, gpytorch, torchdiffeq and pyro run on
musa (docs/REALCODE.md): message passing by scatter, exact-GP marginal likelihood
through Cholesky factor and solves (with jitter retry on a singular kernel), an
adaptive Runge-Kutta step controller, and Gaussian samples drawn from musa's
generator. Each was identical to the CPU in those runs; these keep it so.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ._common import assert_same


def _message_passing(device):
    """GAT-like layer: per-edge scores, softmax over each node's incoming edges by
    scatter (amax, sum), messages summed with index_add_, max/mean pooling."""
    g = torch.Generator().manual_seed(0)
    n, e, f = 12, 40, 6
    x = torch.randn(n, f, generator=g).to(device)
    src, dst = torch.randint(0, n, (2, e), generator=g).to(device)
    torch.manual_seed(0)
    lin = nn.Linear(f, f).to(device)
    att = torch.randn(2 * f, generator=g).to(device).requires_grad_()
    h = lin(x)
    score = torch.nn.functional.leaky_relu(torch.cat([h[src], h[dst]], -1) @ att, 0.2)
    smax = score.new_full((n,), -math.inf).scatter_reduce(0, dst, score, "amax", include_self=False)
    w = (score - smax[dst]).exp()
    w = w / w.new_zeros(n).index_add_(0, dst, w)[dst].clamp_min(1e-16)
    out = h.new_zeros(n, f).index_add_(0, dst, w[:, None] * h[src])
    mx = h.new_zeros(n, f).scatter_reduce(0, dst[:, None].expand(-1, f), h[src], "amax",
                                          include_self=False)
    mean = h.new_zeros(n, f).scatter_reduce(0, dst[:, None].expand(-1, f), h[src], "mean",
                                            include_self=False)
    batch = (torch.arange(n) // 4).to(device)
    pooled = torch.zeros(3, f, device=device).scatter_reduce(
        0, batch[:, None].expand(-1, f), out + mx + mean, "amax", include_self=False)
    loss = pooled.square().sum()
    loss.backward()
    return [t.detach().cpu() for t in (loss, out, lin.weight.grad, att.grad)]


def test_message_passing_by_scatter_matches_the_cpu():
    for m, c in zip(_message_passing("musa"), _message_passing("cpu")):
        assert_same(m, c, "scatter message passing")


def _gp_marginal_likelihood(device, dtype):
    """-log p(y) of an RBF GP and its gradient in (log lengthscale, log noise)."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(40, 2, generator=g, dtype=dtype).to(device)
    y = torch.sin(6 * x[:, 0])
    log_ls = torch.tensor(-1.0, dtype=dtype, device=device, requires_grad=True)
    log_noise = torch.tensor(-3.0, dtype=dtype, device=device, requires_grad=True)
    k = torch.exp(-0.5 * torch.cdist(x, x).square() / log_ls.exp().square())
    k = k + log_noise.exp() * torch.eye(40, dtype=dtype, device=device)
    chol, info = torch.linalg.cholesky_ex(k)
    assert int(info) == 0
    alpha = torch.cholesky_solve(y[:, None], chol)
    half = torch.linalg.solve_triangular(chol, y[:, None], upper=False)
    nll = 0.5 * (y[None] @ alpha).squeeze() + chol.diagonal().log().sum()
    nll = nll + 0.0 * half.sum()
    nll.backward()
    return [t.detach().cpu() for t in (nll, alpha, log_ls.grad, log_noise.grad)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gp_marginal_likelihood_matches_the_cpu(dtype):
    for m, c in zip(_gp_marginal_likelihood("musa", dtype), _gp_marginal_likelihood("cpu", dtype)):
        assert_same(m, c, f"GP marginal likelihood ({dtype})", dtype=dtype)


def _jittered_cholesky(device):
    """linear_operator's psd_safe_cholesky: retry with growing jitter while info != 0."""
    a = torch.randn(6, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    k = (a @ a.T).to(device)
    infos = []
    jitter = 1e-8
    chol, info = torch.linalg.cholesky_ex(k)
    while int(info) != 0:
        infos.append(int(info))
        chol, info = torch.linalg.cholesky_ex(k + jitter * torch.eye(6, dtype=k.dtype, device=device))
        jitter *= 10
    return infos, chol.cpu()


def test_cholesky_info_and_jitter_retry_match_the_cpu():
    (infos_m, chol_m), (infos_c, chol_c) = _jittered_cholesky("musa"), _jittered_cholesky("cpu")
    assert infos_m == infos_c and infos_c, "the singular kernel should need a jitter retry"
    assert_same(chol_m, chol_c, "jittered Cholesky factor", dtype=torch.float64)


def _adaptive_heun(device):
    """torchdiffeq's pattern: embedded pair, RMS error norm, step accepted or shrunk
    by a data-dependent branch, the final time nudged with nextafter."""
    torch.manual_seed(0)
    f = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2)).to(device)
    y = torch.tensor([[1.0, 0.5], [-0.3, 0.8]], device=device)
    t, t1, dt = torch.tensor(0.0, device=device), torch.tensor(1.0, device=device), 0.1
    accepted = []
    while t < t1:
        h = torch.minimum(torch.tensor(dt, device=device), t1 - t)
        k1 = f(y ** 3)
        k2 = f((y + h * k1) ** 3)
        y_new = y + h * 0.5 * (k1 + k2)
        err = (h * 0.5 * (k2 - k1)) / (1e-4 + 1e-4 * torch.maximum(y.abs(), y_new.abs()))
        norm = err.square().mean().sqrt()
        if norm <= 1:
            t, y = torch.nextafter(t + h, t1) if t + h < t1 else t + h, y_new
            accepted.append(float(h))
        dt = float(h * torch.clamp(0.9 * norm.detach().pow(-0.5), 0.2, 10.0))
    y.sum().backward()
    return accepted, [y.detach().cpu()] + [p.grad.cpu() for p in f.parameters()]


def test_adaptive_step_controller_takes_the_cpus_steps():
    (steps_m, out_m), (steps_c, out_c) = _adaptive_heun("musa"), _adaptive_heun("cpu")
    # The same steps accepted; their sizes come from the error norm, so they are the
    # CPU's bit for bit only where the kernels are (host driver), else within its tolerance.
    assert len(steps_m) == len(steps_c)
    assert_same(torch.tensor(steps_m), torch.tensor(steps_c), "accepted step sizes")
    for m, c in zip(out_m, out_c):
        assert_same(m, c, "adaptive Heun solution and gradients")


def _reparameterized_draws(device, sync_state):
    torch.manual_seed(0)
    nn.Linear(4, 4)  # host-side init consumes the CPU generator in both runs
    if sync_state:
        torch.musa.set_rng_state(torch.get_rng_state())
    loc = torch.zeros(3, 2, device=device, requires_grad=True)
    z = loc + torch.empty(3, 2, device=device).normal_()
    u = torch.empty(3, device=device).uniform_()
    n = torch.normal(torch.zeros(3, device=device), torch.ones(3, device=device))
    return [t.detach().cpu() for t in (z, u, n)]


@pytest.mark.requires_host_driver("compares musa's draws with the CPU generator's")
def test_musa_generator_given_the_cpu_state_draws_the_cpus_samples():
    """pyro SVI on musa vs the CPU: after host-side init the CPU run's sampler has
    moved on while musa's generator has not (two generators, by design); given the
    CPU's state, musa draws the same samples."""
    cpu = _reparameterized_draws("cpu", sync_state=False)
    synced = _reparameterized_draws("musa", sync_state=True)
    for m, c in zip(synced, cpu):
        assert torch.equal(m, c)
    unsynced = _reparameterized_draws("musa", sync_state=False)
    assert not torch.equal(unsynced[0], cpu[0])

"""torch_musa.optim.FusedLAMB against a float64 LAMB written here from the paper/apex
description (global-norm clipping, Adam moments, trust ratio)."""
import math

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa.optim import FusedLAMB


def reference_lamb(params, grads_per_step, lr, betas, eps, weight_decay, adam_w_mode,
                   grad_averaging, max_grad_norm, use_nvlamb, bias_correction=True):
    """Plain-Python float64 LAMB over lists of CPU tensors; returns the final params."""
    ps = [p.double().clone() for p in params]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
    b1, b2 = betas
    for step, grads in enumerate(grads_per_step, start=1):
        gs = [g.double() for g in grads]
        total = math.sqrt(sum(float((g * g).sum()) for g in gs))
        clip = total / max_grad_norm if total > max_grad_norm else 1.0
        c1 = 1 - b1 ** step if bias_correction else 1.0
        c2 = 1 - b2 ** step if bias_correction else 1.0
        for i, g in enumerate(gs):
            sg = g / clip
            if not adam_w_mode:
                sg = sg + weight_decay * ps[i]
            ms[i] = b1 * ms[i] + ((1 - b1) if grad_averaging else 1.0) * sg
            vs[i] = b2 * vs[i] + (1 - b2) * sg * sg
            upd = (ms[i] / c1) / ((vs[i] / c2).sqrt() + eps)
            if adam_w_mode:
                upd = upd + weight_decay * ps[i]
            ratio = lr
            if use_nvlamb or weight_decay != 0:
                pn, un = float(ps[i].norm()), float(upd.norm())
                if pn != 0 and un != 0:
                    ratio = lr * pn / un
            ps[i] = ps[i] - ratio * upd
    return ps


@pytest.mark.parametrize("adam_w_mode,weight_decay,use_nvlamb,grad_averaging,max_grad_norm", [
    (True, 0.01, False, True, 1.0),
    (False, 0.05, False, True, 1.0),
    (True, 0.0, False, True, 1.0),   # no decay: plain lr, no trust ratio
    (True, 0.0, True, False, 100.0),  # nvlamb: trust ratio without decay; no clipping
])
def test_fused_lamb_matches_float64_reference(adam_w_mode, weight_decay, use_nvlamb,
                                               grad_averaging, max_grad_norm):
    gen = torch.Generator().manual_seed(3)
    shapes = [(7, 5), (11,), (2, 3, 4)]
    init = [torch.randn(s, generator=gen) for s in shapes]
    steps = [[torch.randn(s, generator=gen) * 3 for s in shapes] for _ in range(4)]
    params = [torch.nn.Parameter(t.to("musa")) for t in init]
    opt = FusedLAMB(params, lr=0.05, betas=(0.9, 0.99), eps=1e-6, weight_decay=weight_decay,
                    adam_w_mode=adam_w_mode, grad_averaging=grad_averaging,
                    max_grad_norm=max_grad_norm, use_nvlamb=use_nvlamb)
    for grads in steps:
        for p, g in zip(params, grads):
            p.grad = g.to("musa")
        opt.step()
    expected = reference_lamb(init, steps, 0.05, (0.9, 0.99), 1e-6, weight_decay, adam_w_mode,
                              grad_averaging, max_grad_norm, use_nvlamb)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.detach().cpu().double(), e, rtol=1e-5, atol=1e-6)
    assert opt.param_groups[0]["step"] == 4


def test_fused_lamb_float16_params_and_errors():
    p = torch.nn.Parameter(torch.randn(6, device="musa").half())
    init = p.detach().cpu().clone()
    g = torch.randn(6)
    p.grad = g.half().to("musa")
    FusedLAMB([p], lr=0.1).step()
    expected = reference_lamb([init.float()], [[g.half().float()]], 0.1, (0.9, 0.999), 1e-6, 0.01,
                              True, True, 1.0, False)[0]
    assert p.dtype == torch.float16
    torch.testing.assert_close(p.detach().cpu().double(), expected, rtol=2e-3, atol=2e-3)
    with pytest.raises(RuntimeError, match="AMSGrad"):
        FusedLAMB([p], amsgrad=True)
    q = torch.nn.Parameter(torch.randn(3, device="musa").to(torch.bfloat16))
    q.grad = torch.ones_like(q)
    with pytest.raises(RuntimeError, match="fp16 and fp32"):
        FusedLAMB([q]).step()


def test_fused_lamb_zero_grad_and_signature():
    import inspect
    names = list(inspect.signature(FusedLAMB.__init__).parameters)
    assert names == ["self", "params", "lr", "bias_correction", "betas", "eps", "weight_decay",
                     "amsgrad", "adam_w_mode", "grad_averaging", "set_grad_none",
                     "max_grad_norm", "use_nvlamb"]
    p = torch.nn.Parameter(torch.ones(2, device="musa"))
    p.grad = torch.ones(2, device="musa")
    FusedLAMB([p]).zero_grad()
    assert p.grad is None
    p.grad = torch.ones(2, device="musa")
    FusedLAMB([p], set_grad_none=False).zero_grad()
    assert p.grad is not None and not p.grad.any()

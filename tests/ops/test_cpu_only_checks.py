"""Argument checks PyTorch's composites make only for CPU inputs answer the same on
musa (torch_musa/ops/cpu_only_checks.py)."""
from __future__ import annotations

import pytest
import torch

import torch_musa  # noqa: F401

HOST = pytest.mark.requires_host_driver(
    "the cuda driver keeps CUDA's no-sync quantile, whose out-of-range q is a device-side "
    "assert", unsafe_elsewhere=True)


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs).cpu()
    except RuntimeError as e:
        return str(e)


@HOST
@pytest.mark.parametrize("op", [torch.quantile, torch.nanquantile])
@pytest.mark.parametrize("q", [[-0.05], [1.5], [0.2, float("nan")], [0.3, 0.9], [], 0.5])
def test_quantile_checks_q_as_on_the_cpu(op, q):
    """q = -0.05 returned 0.0 on musa (the CPU raises); q = 1.5 raised an index error."""
    x = torch.arange(10.0)
    q = torch.tensor(q)
    cpu = _outcome(op, x, q)
    musa = _outcome(op, x.to("musa"), q.to("musa"))
    if isinstance(cpu, str):
        assert musa == cpu
    else:
        assert torch.equal(musa, cpu)


@HOST
def test_checked_quantile_keeps_autograd_out_and_inference_mode():
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    q = torch.tensor([0.25, 0.8])
    xc, xm = x.clone().requires_grad_(), x.to("musa").requires_grad_()
    torch.quantile(xc, q, dim=1).sum().backward()
    torch.quantile(xm, q.to("musa"), dim=1).sum().backward()
    assert torch.equal(xm.grad.cpu(), xc.grad)
    out = torch.empty(2, 4, device="musa")
    torch.nanquantile(x.to("musa"), q.to("musa"), dim=1, out=out)
    assert torch.equal(out.cpu(), torch.nanquantile(x, q, dim=1))
    with torch.inference_mode(), pytest.raises(RuntimeError, match=r"in the range \[0, 1\]"):
        torch.quantile(x.to("musa"), torch.tensor([2.0], device="musa"))

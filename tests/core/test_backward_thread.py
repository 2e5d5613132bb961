"""musa's backward runs on the thread that calls backward(), as the CPU device's does
(host driver): on its own autograd thread its OpenMP team competed with the caller's
for the cores, and a 2-thread small-op step took 1.66x its 1-thread time."""
import threading

import pytest
import torch

import torch_musa  # noqa: F401



class _Where(torch.autograd.Function):
    seen: list = []

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        _Where.seen.append(threading.get_ident())
        return g * 2


@pytest.mark.requires_host_driver(
    "the cuda driver keeps autograd's device threads: its kernels do not run on host threads")
def test_backward_runs_on_the_calling_thread():
    _Where.seen.clear()
    x = torch.ones(4, device="musa", requires_grad=True)
    _Where.apply(x).sum().backward()
    assert _Where.seen == [threading.get_ident()]
    assert torch.equal(x.grad.cpu(), torch.full((4,), 2.0))


def test_another_threads_backward_still_completes():
    # The setting is the importing thread's autograd state; a thread of the user's
    # gets autograd's device thread, as before.
    _Where.seen.clear()
    out = {}

    def work():
        x = torch.ones(3, device="musa", requires_grad=True)
        _Where.apply(x).sum().backward()
        out["grad"], out["ident"] = x.grad.cpu(), threading.get_ident()

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=60)
    assert torch.equal(out["grad"], torch.full((3,), 2.0))
    assert len(_Where.seen) == 1

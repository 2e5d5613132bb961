"""MUSA graphs from torch.compile: mode="reduce-overhead" and backend="musagraphs"."""
import copy
import ctypes

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

import torch_musa  # noqa: F401
import torch_musa.core.graphs as graphs


@pytest.fixture
def replays(monkeypatch):
    """Counts MUSAGraph.replay calls; a fresh dynamo and no compiled-graph cache."""
    count = [0]
    stock = graphs.MUSAGraph.replay

    def replay(self):
        count[0] += 1
        return stock(self)

    monkeypatch.setattr(graphs.MUSAGraph, "replay", replay)
    torch._dynamo.reset()
    counters.clear()
    with torch._inductor.config.patch(force_disable_caches=True):
        yield count
    torch._dynamo.reset()


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _add_one(dst, src):
    """Host code over musa memory that the dispatcher never sees (as Inductor's C++ kernels)."""
    n = src.numel()
    a = np.frombuffer((ctypes.c_float * n).from_address(src.data_ptr()), dtype=np.float32)
    b = np.frombuffer((ctypes.c_float * n).from_address(dst.data_ptr()), dtype=np.float32)
    b[:] = a + 1


@pytest.mark.requires_host_driver("host code writes musa memory through its host address",
                                   unsafe_elsewhere=True)
def test_capture_records_host_callables():
    x = torch.zeros(4, device="musa")
    before = len(graphs._host_calls)
    g = torch.musa.MUSAGraph()
    with torch.musa.graph(g):
        y = torch.empty_like(x)
        graphs.run_host_callable(_add_one, y, x)
        z = y * 2
    x.copy_(torch.arange(4.0))
    g.replay()
    assert z.cpu().tolist() == [2.0, 4.0, 6.0, 8.0]
    x.fill_(10)
    g.replay()
    assert z.cpu().tolist() == [22.0] * 4
    assert len(graphs._host_calls) == before + 1
    g.reset()  # the recorded call goes with the graph
    assert len(graphs._host_calls) == before


@pytest.mark.slow
@pytest.mark.requires_host_driver("reduce-overhead's MUSA graphs are the host driver's")
def test_reduce_overhead_inference_replays_and_matches_eager(replays):
    model = _mlp()
    cpu_model = _mlp()
    model.to("musa")
    f = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(3, 8)
            y = f(x.to("musa"))
            torch.testing.assert_close(y.cpu(), model(x.to("musa")).cpu(), rtol=0, atol=0)
            torch.testing.assert_close(y.cpu(), cpu_model(x))
    assert replays[0] >= 3  # warm-up, then a capture replayed on every call
    assert counters["inductor"]["cudagraph_skips"] == 0
    from torch_musa._inductor import musagraph_trees

    assert musagraph_trees.get_manager(0, create_if_none_exists=False) is not None
    torch._dynamo.reset()  # frees musa graphs as it frees CUDA's
    assert musagraph_trees.get_manager(0, create_if_none_exists=False) is None


@pytest.mark.slow
@pytest.mark.requires_host_driver("reduce-overhead's MUSA graphs are the host driver's")
def test_reduce_overhead_training_replays_and_matches_eager(replays):
    model = _mlp().to("musa")
    f = torch.compile(model, mode="reduce-overhead")
    for i in range(6):  # y (and autograd's graph) of a step alive during the next: one capture
        x = torch.randn(3, 8, device="musa", requires_grad=True)
        x_eager = x.detach().clone().requires_grad_()
        y = f(x)
        y.sum().backward()
        y_eager = model(x_eager)
        torch.testing.assert_close(y, y_eager, rtol=0, atol=0)
        y_eager.sum().backward()
        torch.testing.assert_close(x.grad, x_eager.grad, rtol=0, atol=0)
    assert replays[0] == 2 * 5  # forward and backward, from the second step on
    assert counters["inductor"]["cudagraph_skips"] == 0


@pytest.mark.slow
@pytest.mark.requires_host_driver("reduce-overhead's MUSA graphs are the host driver's")
def test_outputs_held_for_a_pending_backward_are_not_overwritten(replays):
    """Two forwards before one backward (gradient accumulation): each keeps its outputs."""
    model = _mlp().to("musa")
    f = torch.compile(model, mode="reduce-overhead")
    xs = [torch.randn(3, 8, device="musa") for _ in range(3)]
    f(xs[0]).sum().backward()  # warm-up
    model.zero_grad()
    loss = f(xs[1]).sum() + f(xs[2]).sum()
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (model(xs[1]).sum() + model(xs[2]).sum()).backward()
    for g, want in zip(got, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(g, want)
    assert replays[0] > 0


@pytest.mark.slow
@pytest.mark.requires_host_driver("reduce-overhead's MUSA graphs are the host driver's")
def test_outputs_the_caller_keeps_are_not_overwritten(replays):
    model = _mlp().to("musa")
    f = torch.compile(model, mode="reduce-overhead")
    xs = [torch.randn(3, 8, device="musa") for _ in range(6)]
    with torch.no_grad():
        kept = [f(x) for x in xs]
        for x, y in zip(xs, kept):
            torch.testing.assert_close(y, model(x), rtol=0, atol=0)
    assert replays[0] > 0


@pytest.mark.slow
@pytest.mark.requires_host_driver("reduce-overhead's MUSA graphs are the host driver's")
def test_cpu_nodes_skip_with_cudas_reason(replays, monkeypatch):
    from torch_musa._inductor import reduce_overhead

    reasons = []
    monkeypatch.setattr(reduce_overhead._log, "warning", lambda msg, *a: reasons.append(msg))

    @torch.compile(mode="reduce-overhead")
    def f(x, y):
        return x * 2, y + 1

    x, y = torch.randn(4, device="musa"), torch.randn(4)
    for _ in range(3):
        a, b = f(x, y)
    torch.testing.assert_close(a.cpu(), x.cpu() * 2)
    torch.testing.assert_close(b, y + 1)
    assert counters["inductor"]["cudagraph_skips"] == 1
    assert len(reasons) == 1 and reasons[0].startswith("skipping cudagraphs due to cpu device (")
    assert replays[0] == 0


@pytest.mark.slow
def test_mutated_input_skips_with_cudas_reason(replays):
    @torch.compile(mode="reduce-overhead")
    def f(x, buf):
        buf.add_(1)
        return x * 2

    x, buf = torch.randn(4, device="musa"), torch.zeros(4, device="musa")
    for _ in range(3):
        y = f(x, buf)
    torch.testing.assert_close(y.cpu(), x.cpu() * 2)
    assert buf.cpu().tolist() == [3.0] * 4  # each call mutated it exactly once
    assert counters["inductor"]["cudagraph_skips"] == 1
    assert replays[0] == 0


@pytest.mark.slow
def test_musagraphs_backend(replays):
    assert "musagraphs" in torch._dynamo.list_backends(exclude_tags=())
    model = _mlp().to("musa")
    f = torch.compile(model, backend="musagraphs")
    for _ in range(3):
        x = torch.randn(3, 8, device="musa", requires_grad=True)
        x_eager = x.detach().clone().requires_grad_()
        y = f(x)
        y.sum().backward()
        y_eager = model(x_eager)
        y_eager.sum().backward()
        torch.testing.assert_close(y, y_eager, rtol=0, atol=0)
        torch.testing.assert_close(x.grad, x_eager.grad, rtol=0, atol=0)
    assert replays[0] >= 4
    assert counters["inductor"]["cudagraph_skips"] == 0


@pytest.mark.slow
def test_musagraphs_backend_skips_cpu_nodes(replays):
    @torch.compile(backend="musagraphs")
    def f(x, y):
        return x * 2, y + 1

    x, y = torch.randn(4, device="musa"), torch.randn(4)
    for _ in range(2):
        a, b = f(x, y)
    torch.testing.assert_close(b, y + 1)
    assert counters["inductor"]["cudagraph_skips"] == 1
    assert replays[0] == 0


@pytest.mark.slow
@pytest.mark.requires_host_driver("reduce-overhead's MUSA graphs are the host driver's")
def test_reduce_overhead_is_default_compile_bit_for_bit(replays):
    """Replays draw random numbers and update buffers as the compiled code run directly does."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Dropout(0.3)).to("musa")
    twin = copy.deepcopy(model)
    graphed, direct = torch.compile(model, mode="reduce-overhead"), torch.compile(twin)
    for step in range(3):
        x = torch.randn(2, 3, 8, 8, device="musa")
        torch.manual_seed(step)
        y = graphed(x)
        y.sum().backward()
        torch.manual_seed(step)
        y_direct = direct(x)
        y_direct.sum().backward()
        assert torch.equal(y, y_direct)
        assert torch.equal(model[1].running_mean, twin[1].running_mean)
        assert torch.equal(model[0].weight.grad, twin[0].weight.grad)
    assert replays[0] >= 4

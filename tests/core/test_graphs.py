"""MUSA graphs (torch.musa.MUSAGraph, graph, graph_pool_handle, make_graphed_callables):
capture records the work on the capturing stream; replay re-runs it over the same static
memory, so in-place updates of static inputs show up in the static outputs, as on CUDA."""
import copy
import gc

import pytest
import torch

from torch_musa.config import CONFIG

# Under the cuda driver these are CUDA graphs: these tests check the host driver's own promises.
HOST_MESSAGES = pytest.mark.requires_host_driver(
    "the host driver's messages and capture modes (CUDA words an invalidated capture_end and "
    "a sync under relaxed capture differently)")
HOST_DUMP = pytest.mark.requires_host_driver("the host driver's dump lists aten ops; CUDA's "
                                             "lists kernels")
HOST_CPU_WORK = pytest.mark.requires_host_driver(
    "the host driver warns about CPU work in capture; under the cuda driver Adam raises")


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def side_warmup(fn, iters=3):
    """CUDA's recipe: warm up on a side stream before capture."""
    s = torch.musa.Stream()
    s.wait_stream(torch.musa.current_stream())
    with torch.musa.stream(s):
        for _ in range(iters):
            fn()
    torch.musa.current_stream().wait_stream(s)


def test_is_current_stream_capturing_true_only_inside_capture():
    assert torch.musa.is_current_stream_capturing() is False
    g = torch.musa.MUSAGraph()
    x = torch.ones(4, device="musa")
    with torch.musa.graph(g):
        assert torch.musa.is_current_stream_capturing() is True
        x.mul_(2)
    assert torch.musa.is_current_stream_capturing() is False
    with torch.musa.stream(torch.musa.Stream()):  # another stream: not capturing
        assert torch.musa.is_current_stream_capturing() is False


def test_mlp_training_step_replay_matches_eager():
    """Forward, backward and optimizer step captured whole, replayed on new data."""
    eager = mlp().to("musa")
    graphed = copy.deepcopy(eager)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_g = torch.optim.SGD(graphed.parameters(), lr=0.1, momentum=0.9)
    static_x = torch.randn(16, 8, device="musa")
    static_y = torch.randn(16, 4, device="musa")

    def step(model, opt, x, y):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    side_warmup(lambda: step(graphed, opt_g, static_x, static_y))
    for _ in range(3):
        step(eager, opt_e, static_x, static_y)
    before = [p.detach().clone() for p in graphed.parameters()]
    g = torch.musa.MUSAGraph()
    opt_g.zero_grad(set_to_none=True)
    with torch.musa.graph(g):
        static_loss = step(graphed, opt_g, static_x, static_y)
    # Capture runs nothing observable: the parameters are as before capture.
    for p, b in zip(graphed.parameters(), before):
        assert torch.equal(p, b)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen)
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        loss = step(eager, opt_e, x.to("musa"), y.to("musa"))
        torch.testing.assert_close(static_loss, loss)
    for pg, pe in zip(graphed.parameters(), eager.parameters()):
        torch.testing.assert_close(pg, pe)
        assert not torch.equal(pg, pe.new_zeros(pe.shape))


def test_inplace_static_input_update_updates_static_output():
    x = torch.zeros(3, 4, device="musa")
    w = torch.randn(4, 5, device="musa")
    g = torch.musa.MUSAGraph()
    with torch.musa.graph(g):
        y = torch.relu(x @ w + 1) * 2
        z = y.sum(dim=0)
        v = y.t()  # a view of a captured output follows it
    for k in range(3):
        x.copy_(torch.full((3, 4), float(k)).to("musa"))
        ptr = y.data_ptr()
        g.replay()
        assert y.data_ptr() == ptr  # same static memory
        ref = torch.relu(x.cpu() @ w.cpu() + 1) * 2
        torch.testing.assert_close(y.cpu(), ref)
        torch.testing.assert_close(z.cpu(), ref.sum(0))
        assert torch.equal(v.cpu(), y.cpu().t())


def test_capture_leaves_pre_existing_memory_and_rng_as_they_were():
    """CUDA capture runs no kernel: memory written by captured ops and the generator
    are unchanged after capture; replay then does the work."""
    buf = torch.ones(5, device="musa")
    state = torch.musa.get_rng_state()
    g = torch.musa.MUSAGraph()
    with torch.musa.graph(g):
        buf.add_(1)
        noise = torch.rand(5, device="musa")
    assert torch.equal(buf.cpu(), torch.ones(5))
    assert torch.equal(torch.musa.get_rng_state(), state)
    g.replay()
    g.replay()
    assert torch.equal(buf.cpu(), torch.full((5,), 3.0))
    assert noise.shape == (5,)


def test_pool_ids_follow_cudas_convention():
    """c10's MempoolId_t: the first id is set for a pool a capture creates, the second for
    one graph_pool_handle() creates, so (0, n) and (n, 0) never collide. Under the cuda driver
    a capture takes a graph_pool_handle() of its own (a capture CUDA fails to end gives it back)."""
    h1, h2 = torch.musa.graph_pool_handle(), torch.musa.graph_pool_handle()
    assert h1[0] == 0 and h2[0] == 0 and 0 < h1[1] < h2[1]
    g = torch.musa.MUSAGraph()
    with torch.musa.graph(g):
        torch.ones(2, device="musa").add_(1)
    first, second = g.pool()
    if CONFIG.driver == "host":
        assert first > 0 and second == 0
    else:
        assert first == 0 and second > h2[1]


def test_graphs_share_a_pool_and_replay_in_capture_order():
    pool = torch.musa.graph_pool_handle()
    assert isinstance(pool, tuple) and len(pool) == 2
    a = torch.randn(6, device="musa")
    g1, g2 = torch.musa.MUSAGraph(), torch.musa.MUSAGraph()
    with torch.musa.graph(g1, pool=pool):
        b = a.exp()
    with torch.musa.graph(g2, pool=g1.pool()):
        c = b * 3 - 1
    assert g1.pool() == g2.pool() == pool
    # Memory allocated during capture comes from the pool (the caching allocator's view).
    pooled = {blk["address"] for s in torch.musa.memory_snapshot(pool) for blk in s["blocks"]}
    assert b.data_ptr() in pooled and c.data_ptr() in pooled and a.data_ptr() not in pooled
    for _ in range(3):
        a.copy_(torch.randn(6).to("musa"))
        g1.replay()
        g2.replay()
        torch.testing.assert_close(c.cpu(), a.cpu().exp() * 3 - 1)
    own = torch.musa.MUSAGraph()
    with torch.musa.graph(own):
        a.sin()
    assert own.pool() != pool  # without pool=, a private pool
    g1.reset()  # g2 keeps the shared pool (and b, its input) alive
    g2.replay()
    torch.testing.assert_close(c.cpu(), b.cpu() * 3 - 1)
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g1.replay()


def test_memory_dropped_during_capture_is_reused_in_the_pool():
    """As CUDA's private pools: intermediates freed during capture give their blocks back to
    the graph's pool, later allocations of the capture reuse them, and replay stays right."""
    mib = 1 << 20
    x = torch.randn(mib, device="musa")  # 4 MiB
    g = torch.musa.MUSAGraph()
    with torch.musa.graph(g):
        y = x
        for _ in range(10):  # 20 intermediates of 4 MiB, at most 2 alive at once
            y = (y * 1.01).relu()
    reserved = sum(s["total_size"] for s in torch.musa.memory_snapshot(g.pool()))
    assert reserved <= 24 * mib  # one 20 MiB segment (and a small one), not 80 MiB
    for _ in range(2):
        x.copy_(torch.randn(mib))
        g.replay()
        ref = x
        for _ in range(10):
            ref = (ref * 1.01).relu()
        assert torch.equal(y, ref)


def test_make_graphed_callables_forward_and_backward_match_eager():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3))
    module = module.to("musa")
    eager = copy.deepcopy(module)

    def fn(u, v):
        return (u * v).sin() + v

    x = torch.randn(4, 6, device="musa", requires_grad=True)
    u = torch.randn(5, device="musa", requires_grad=True)
    v = torch.randn(5, device="musa", requires_grad=False)
    graphed_module, graphed_fn = torch.musa.make_graphed_callables(
        (module, fn), ((x,), (u, v)))
    for _ in range(3):
        # As with CUDA graphs, grads are set to None between steps (the first backward's
        # parameter grads may be the static grad buffers themselves).
        module.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
        xi = torch.randn(4, 6, device="musa", requires_grad=True)
        xe = xi.detach().clone().requires_grad_()
        ui = torch.randn(5, device="musa", requires_grad=True)
        ue = ui.detach().clone().requires_grad_()
        out = graphed_module(xi)
        out_fn = graphed_fn(ui, v)
        ref = eager(xe)
        ref_fn = fn(ue, v)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(out_fn, ref_fn)
        (out.square().sum() + out_fn.sum()).backward()
        (ref.square().sum() + ref_fn.sum()).backward()
        torch.testing.assert_close(xi.grad, xe.grad)
        torch.testing.assert_close(ui.grad, ue.grad)
        for pg, pe in zip(module.parameters(), eager.parameters()):
            torch.testing.assert_close(pg.grad, pe.grad)
    module.eval()  # another training state runs the eager forward
    torch.testing.assert_close(module(x), eager(x))


def test_dropout_draws_new_numbers_each_replay_reproducibly():
    """Each replay draws from the device generator as eager code would: new masks per
    replay, and after manual_seed the same masks as the eager ops."""
    x = torch.ones(2000, device="musa")
    g = torch.musa.MUSAGraph()
    with torch.musa.graph(g):
        y = torch.nn.functional.dropout(x, p=0.5)
    torch.musa.manual_seed(7)
    g.replay()
    first = y.cpu()
    g.replay()
    second = y.cpu()
    assert not torch.equal(first, second)
    assert 0.4 < (first == 0).float().mean() < 0.6
    torch.musa.manual_seed(7)
    e1 = torch.nn.functional.dropout(x, p=0.5).cpu()
    e2 = torch.nn.functional.dropout(x, p=0.5).cpu()
    assert torch.equal(first, e1) and torch.equal(second, e2)


FORBIDDEN = {
    "item": lambda t: t.sum().item(),
    "to_cpu": lambda t: t.cpu(),
    "copy_to_cpu": lambda t: torch.empty(3).copy_(t),
    "synchronize": lambda t: torch.musa.synchronize(),
    "stream_synchronize": lambda t: torch.musa.current_stream().synchronize(),
    "event_synchronize": lambda t: torch.musa.current_stream().record_event().synchronize(),
    "nonzero": lambda t: t.nonzero(),
    "bool_mask": lambda t: t[t > 0],
}


@pytest.mark.parametrize("name", list(FORBIDDEN))
def test_forbidden_operation_raises_and_capture_ends_cleanly(name):
    # Under the cuda driver, the CUDA capture that this invalidates used to leave the default
    # generator in capture mode: every later randn in the process raised.
    t = torch.randn(3, device="musa")
    g = torch.musa.MUSAGraph()
    before = t.clone()
    # CUDA refuses a sync on an event recorded in the capture, and (torch 2.11) a copy to
    # pageable CPU memory, with words of its own.
    refused = ("operation not permitted (when stream is capturing|on an event last recorded)"
               "|Cannot copy between CPU and CUDA tensors during CUDA graph capture")
    with pytest.raises(RuntimeError, match=refused):
        with torch.musa.graph(g):
            t.mul_(2)
            FORBIDDEN[name](t)
    assert not torch.musa.is_current_stream_capturing()
    assert torch.musa.current_stream() == torch.musa.default_stream()
    assert torch.equal(t, before)  # the aborted capture put the written memory back
    torch.musa.synchronize()  # the process is usable: syncs, .item(), new captures
    assert t.sum().item() == pytest.approx(before.sum().item())
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    with torch.musa.graph(g):
        out = t * 10
    g.replay()
    torch.testing.assert_close(out, before * 10)
    assert torch.randn(2, device="musa").isfinite().all()  # the generator left capture mode


def test_refused_capture_begin_and_failed_capture_leave_the_process_usable():
    """A capture refused at begin (the default stream) or that CUDA fails to end keeps
    neither the generator in capture mode nor the pool's memory."""
    with pytest.raises(RuntimeError, match="non-default stream"):
        torch.musa.MUSAGraph().capture_begin()
    assert not torch.musa.is_current_stream_capturing()
    assert torch.randn(2, device="musa").isfinite().all()
    t = torch.ones(1 << 20, device="musa")
    torch.musa.synchronize()
    gc.collect()
    torch.musa.empty_cache()
    reserved = torch.musa.memory_reserved()
    for _ in range(3):
        with pytest.raises(RuntimeError):
            with torch.musa.graph(torch.musa.MUSAGraph()):
                big = t * 2  # 4 MiB from the graph's pool
                torch.musa.synchronize()
        del big
    gc.collect()
    torch.musa.empty_cache()
    assert torch.musa.memory_reserved() == reserved
    assert torch.randn(2, device="musa").isfinite().all()


@HOST_MESSAGES
def test_manual_capture_end_reports_an_invalidated_capture():
    g = torch.musa.MUSAGraph()
    s = torch.musa.Stream()
    t = torch.ones(2, device="musa")
    with torch.musa.stream(s):
        g.capture_begin()
        with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
            s.synchronize()
        with pytest.raises(RuntimeError, match="invalidated"):
            g.capture_end()
    assert not torch.musa.is_current_stream_capturing()
    t.sum().item()


@HOST_MESSAGES
def test_capture_error_modes_and_argument_checks():
    t = torch.ones(2, device="musa")
    g = torch.musa.MUSAGraph()
    with torch.musa.graph(g, capture_error_mode="relaxed"):
        u = t + 1
        torch.musa.synchronize()  # relaxed: a device-wide sync is not refused
    g.replay()
    assert torch.equal(u.cpu(), torch.full((2,), 2.0))
    with pytest.raises(ValueError, match="capture_error_mode"):
        torch.musa.MUSAGraph().capture_begin(capture_error_mode="loose")
    with pytest.raises(RuntimeError, match="non-default stream"):
        torch.musa.MUSAGraph().capture_begin()
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        with torch.musa.stream(torch.musa.Stream()):
            g.capture_begin()


@HOST_DUMP
def test_debug_dump_writes_the_captured_ops(tmp_path):
    g = torch.musa.MUSAGraph()
    g.enable_debug_mode()
    x = torch.randn(4, 4, device="musa")
    with torch.musa.graph(g):
        (x @ x).relu_()
    path = tmp_path / "graph.dot"
    g.debug_dump(str(path))
    text = path.read_text()
    assert text.startswith("digraph") and "aten::mm" in text and "aten::relu_" in text


@HOST_CPU_WORK
def test_cpu_work_in_capture_warns_and_capturable_adam_replays():
    """Replay repeats musa work only (as CUDA): Adam's CPU step count would not advance."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to("musa")
    x = torch.randn(5, 4, device="musa")
    plain = torch.optim.Adam(model.parameters(), lr=0.1)
    model(x).sum().backward()
    plain.step()
    with pytest.warns(UserWarning, match="wrote a CPU tensor during MUSA graph capture"):
        with torch.musa.graph(torch.musa.MUSAGraph()):
            model(x).sum().backward()
            plain.step()
    eager = copy.deepcopy(model)
    opt_g = torch.optim.Adam(model.parameters(), lr=0.1, capturable=True)
    opt_e = torch.optim.Adam(eager.parameters(), lr=0.1, capturable=True)

    def step(m, opt):
        opt.zero_grad(set_to_none=True)
        m(x).square().mean().backward()
        opt.step()

    side_warmup(lambda: step(model, opt_g))
    for _ in range(3):
        step(eager, opt_e)
    g = torch.musa.MUSAGraph()
    opt_g.zero_grad(set_to_none=True)
    with torch.musa.graph(g):
        step(model, opt_g)
    for _ in range(4):
        g.replay()
        step(eager, opt_e)
    torch.testing.assert_close(model.weight, eager.weight)
    assert float(opt_g.state[model.weight]["step"]) == 7.0


F = torch.nn.functional
OPS = {
    "index": lambda x, i, m: x[i] + x[:, None].sum(),
    "cat_stack": lambda x, i, m: torch.cat([x, torch.stack([x, x + 1]).sum(0)], dim=1),
    "where_masked_fill": lambda x, i, m: torch.where(x > 0, x, x * 0.1).masked_fill_(x < -1, 0.0),
    "layer_norm": lambda x, i, m: m["ln"](x),
    "embedding": lambda x, i, m: m["emb"](i),
    "conv_pool": lambda x, i, m: F.max_pool2d(m["conv"](x.reshape(1, 3, 4, 4)), 2),
    "sdpa": lambda x, i, m: F.scaled_dot_product_attention(*(x.view(1, 1, 6, 8),) * 3),
    "topk_max_sort": lambda x, i, m: torch.topk(x, 3)[0] + x.max(1).values[:, None] + x.sort(1).values[:, :3],
    "index_put_scatter": lambda x, i, m: x.clone().index_put_((i,), x[0]).scatter_add_(
        0, i[:, None].expand(6, 8), x),
    "float16_roundtrip": lambda x, i, m: x.to(torch.float16).float() * 2 ** x,
    "factories": lambda x, i, m: x + torch.arange(8, device="musa") + torch.full((6, 8), 3.0, device="musa"),
    "cross_entropy": lambda x, i, m: F.cross_entropy(x, i % 8),
}


@pytest.mark.parametrize("name", list(OPS))
def test_replay_matches_eager_for_common_ops(name):
    torch.manual_seed(0)
    mods = {"ln": torch.nn.LayerNorm(8).to("musa"), "emb": torch.nn.Embedding(10, 8).to("musa"),
            "conv": torch.nn.Conv2d(3, 4, 3, padding=1).to("musa")}
    x = torch.randn(6, 8, device="musa")
    i = torch.randint(0, 6, (6,), device="musa")
    with torch.no_grad():
        side_warmup(lambda: OPS[name](x, i, mods))  # cuDNN plans its convolution outside capture
        g = torch.musa.MUSAGraph()
        with torch.musa.graph(g):
            out = OPS[name](x, i, mods)
        for _ in range(2):
            x.copy_(torch.randn(6, 8))
            i.copy_(torch.randint(0, 6, (6,)))
            g.replay()
            torch.testing.assert_close(out, OPS[name](x, i, mods))


@pytest.mark.slow
def test_cuda_names_capture_on_musa_under_cuda_compat(subpython):
    """TORCH_MUSA_CUDA_COMPAT=1: CUDA code's torch.cuda.CUDAGraph / graph / make_graphed_callables
    capture and replay musa work."""
    r = subpython("""
        import torch, torch_musa
        g = torch.cuda.CUDAGraph()
        x = torch.ones(3, device="cuda")
        with torch.cuda.graph(g):
            assert torch.cuda.is_current_stream_capturing()
            y = x * 2
        x.fill_(5)
        g.replay()
        assert y.device.type == "musa" and y.tolist() == [10.0] * 3, y
        f = torch.cuda.make_graphed_callables(lambda a: a * a, (torch.ones(3, device="cuda", requires_grad=True),))
        a = torch.full((3,), 3.0, device="cuda", requires_grad=True)
        f(a).sum().backward()
        assert a.grad.tolist() == [6.0] * 3, a.grad
        print("ok")
    """, env={"TORCH_MUSA_CUDA_COMPAT": "1"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]

"""Ops over long tensor lists (foreach and fused optimizer ops over every
parameter) on musa against the CPU device.

Past 16 arguments an op call looks its host aliases up by hash instead of by
scanning them (csrc/aten/kernel_call.cpp); these cases take that path and check
the aliasing rules the scan kept: one tensor passed twice is one host tensor,
views of one storage share one host storage, results that are arguments come
back as those arguments, fresh results as fresh musa tensors.
"""
import pytest
import torch

import torch_musa

N = 40  # well past the threshold


def _assert_same(musa, cpu):
    """Bit for bit where the host driver runs the CPU's kernels; a GPU's fused AdamW
    rounds on its own (the aliasing rules are what these tests are about)."""
    if torch_musa._driver.NAME == "host":
        assert torch.equal(musa.cpu(), cpu)
    else:
        torch.testing.assert_close(musa.cpu(), cpu, rtol=1e-5, atol=1e-6)


def test_cat_of_views_of_one_storage_and_a_repeated_tensor():
    """Read-only list: rows of one storage share one host storage, the tensor
    passed twice is one host tensor (looked up by its musa storage)."""
    out = {}
    for dev in ("cpu", "musa"):
        base = torch.arange(float(N * 5), device=dev).view(N, 5)
        lone = torch.full((1, 5), -1.0, device=dev)
        other = torch.full((1, 5), -2.0, device=dev)
        out[dev] = torch.cat(list(base.split(1)) + [lone, other, lone, base[3:4]])
    assert torch.equal(out["musa"].cpu(), out["cpu"])


def test_cat_out_returns_its_out_argument():
    """The result that is an argument (out=) comes back as that very tensor."""
    parts = [torch.full((2,), float(i), device="musa") for i in range(N)]
    out = torch.empty(2 * N, device="musa")
    res = torch.cat(parts, out=out)
    assert res is out
    assert torch.equal(out.cpu(), torch.cat([p.cpu() for p in parts]))


def test_fused_step_over_grads_in_one_flat_buffer():
    """A written list: the grads of every parameter in one musa storage (views
    of a flat buffer, as DDP's bucket views and FSDP's flat parameters lay
    them out), read while the parameters are written."""
    out = {}
    for dev in ("cpu", "musa"):
        g = torch.Generator().manual_seed(0)
        flat_grad = torch.randn(N * 3, generator=g).to(dev)
        params = [torch.randn(3, generator=g).to(dev) for _ in range(N)]
        grads = list(flat_grad.view(N, 3).unbind(0))
        exp_avg = [torch.zeros(3, device=dev) for _ in range(N)]
        exp_avg_sq = [torch.zeros(3, device=dev) for _ in range(N)]
        steps = [torch.tensor(1.0, device=dev) for _ in range(N)]
        torch._fused_adamw_(params, grads, exp_avg, exp_avg_sq, [], steps, lr=0.1, beta1=0.9,
                            beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=False,
                            maximize=False)
        out[dev] = torch.stack(params + exp_avg + exp_avg_sq)
    _assert_same(out["musa"], out["cpu"])


def test_many_fresh_results_come_back_as_their_own_tensors():
    """A list of fresh results (the boxed fallback's split_with_sizes_copy):
    each result is adopted once, with its own storage."""
    x = torch.arange(float(N * 2)).view(N, 2)
    res = torch.split_with_sizes_copy(x.to("musa"), [1] * N)
    assert len(res) == N
    ptrs = {r.untyped_storage().data_ptr() for r in res}
    assert len(ptrs) == N
    for i, r in enumerate(res):
        assert r.device.type == "musa" and torch.equal(r.cpu(), x[i:i + 1])


def test_many_results_over_one_argument_come_back_as_views_of_it():
    """Results that are views of an argument map back to views of the musa
    argument (looked up by their host storage), not to copies."""
    x = torch.arange(float(N * 2), device="musa").view(N, 2)
    res = torch.ops.aten.split_with_sizes.default(x, [1] * N)
    for i, r in enumerate(res):
        assert r.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert torch.equal(r.cpu(), x[i:i + 1].cpu())


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
def test_adamw_over_many_parameters_equals_the_cpus(fused):
    def train(device):
        g = torch.Generator().manual_seed(0)
        params = [torch.randn(4, 3, generator=g).to(device).requires_grad_() for _ in range(N)]
        opt = torch.optim.AdamW(params, lr=0.01, weight_decay=0.1,
                                **({"fused": True} if fused else {"foreach": True}))
        for _ in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g).to(device)
            opt.step()
        return [p.detach().cpu() for p in params], opt.state
    cpu, _ = train("cpu")
    musa, state = train("musa")
    for a, b in zip(cpu, musa):
        _assert_same(b, a)
    assert all(s["exp_avg"].device.type == "musa" for s in state.values())


def test_foreach_ops_over_views_and_a_repeated_tensor():
    """The ``_foreach_*`` ops: the CPU's per-tensor loop under the host driver, the
    kernel device's multi-tensor kernels under the cuda driver (ops/fallback_routes.py),
    through the list fallback, with views of one storage and one tensor twice."""
    from torch.profiler import ProfilerActivity, profile

    # Routed at import (after which musa has a kernel for them, so that
    # fallback_routes.kernel_device_foreach_ops() lists none any more).
    routed = torch._C._dispatch_has_kernel_for_dispatch_key("aten::_foreach_add_.Scalar", "PrivateUse1")
    assert routed == (torch_musa._driver.KERNEL_DEVICE == "cuda")
    out = {}
    for dev in ("cpu", "musa"):
        g = torch.Generator().manual_seed(0)
        base = torch.randn(N, 6, generator=g).to(dev)
        extra = torch.randn(3, 6, generator=g).to(dev)
        xs = list(base.split(1)) + [extra]
        ys = [torch.rand(t.shape, generator=g).to(dev) + 0.5 for t in xs]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch._foreach_add_(xs, 1.0)
        per_tensor = sum(e.name == "aten::add_" for e in prof.events())
        torch._foreach_mul_(xs, ys)
        torch._foreach_addcmul_(xs, ys, ys, value=0.5)
        summed = torch._foreach_add(xs, ys, alpha=2.0)
        norms = torch._foreach_norm(summed)
        out[dev] = (base, extra, summed, norms, per_tensor)
    (base, extra, summed, norms, per_tensor), cpu = out["musa"], out["cpu"]
    _assert_same(base, cpu[0])
    _assert_same(extra, cpu[1])
    assert all(s.device.type == "musa" for s in summed) and len(summed) == N + 1
    for got, want in zip(summed + norms, cpu[2] + cpu[3]):
        _assert_same(got, want)
    # One op for the list where the kernel device has a multi-tensor kernel.
    assert per_tensor == (0 if routed else N + 1)


def test_copy_on_write_twins_across_a_long_list_op():
    """Lazy clones among a long op's arguments: one read beside its written twin keeps
    the old values, one written (or read and written) is given its own copy, and the
    tensors they were cloned from keep theirs."""
    out = {}
    for dev in ("cpu", "musa"):
        g = torch.Generator().manual_seed(1)
        xs = [torch.randn(5, generator=g).to(dev) for _ in range(N)]
        read_twins = [x._lazy_clone() for x in xs[:10]]    # read while xs[:10] are written
        written_twins = [x._lazy_clone() for x in xs[10:20]]  # written; xs[10:20] only read
        both = [x._lazy_clone() for x in xs[20:25]]  # read and written by the one op
        before = [x.clone() for x in xs]
        torch._foreach_add_(xs[:10] + written_twins + both, read_twins + xs[10:20] + both, alpha=2.0)
        out[dev] = (xs, read_twins, written_twins + both, before)
    for got, want in zip(out["musa"], out["cpu"]):
        for a, b in zip(got, want):
            _assert_same(a, b)
    xs, read_twins, written_twins, before = out["musa"]
    assert all(torch.equal(t.cpu(), b.cpu()) for t, b in zip(read_twins, before[:10]))
    assert all(torch.equal(x.cpu(), b.cpu()) for x, b in zip(xs[10:20], before[10:20]))
    assert all(torch.equal(w.cpu(), 3 * b.cpu()) for w, b in zip(written_twins, before[10:25]))
    assert all(torch.equal(x.cpu(), b.cpu()) for x, b in zip(xs[20:25], before[20:25]))


def test_list_ops_in_threads_that_exit():
    """Each thread keeps the aliases of long lists in a pool of its own, freed when it
    exits; threads that ran list ops and ended leave the others' results intact."""
    import threading

    def run(dev, results, i):
        ts = [torch.full((3,), float(j), device=dev) for j in range(N * 3)]
        torch._foreach_add_(ts, float(i))
        results[i] = torch.stack(ts).cpu()

    for round_ in range(2):
        got, want = {}, {}
        threads = [threading.Thread(target=run, args=("musa", got, i)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in range(3):
            run("cpu", want, i)
            assert torch.equal(got[i], want[i]), (round_, i)
    run("musa", got, 7)  # the main thread's pool is untouched by the threads' exits
    run("cpu", want, 7)
    assert torch.equal(got[7], want[7])


def test_pooled_aliases_take_each_calls_own_shapes():
    """Aliases come back to the next call in argument order (the pools are last in,
    first out); calls whose arguments differ in shape, strides, offset and dtype from
    the last call's, in turn, see only their own."""
    def run(dev):
        g = torch.Generator().manual_seed(2)
        base = torch.randn(N, 7, generator=g).to(dev)
        mixed = [torch.randn(*((i % 4 + 1, 3) if i % 2 else (5,)), generator=g).to(dev)
                 for i in range(N)]
        strided = [base[i:, 1::2].t() for i in range(N)]  # offsets and transposed strides
        halves = [torch.randn(i % 3 + 2, generator=g).to(dev).half() for i in range(N)]
        for _ in range(3):
            torch._foreach_mul_(mixed, 1.5)
            torch._foreach_add_(strided, 0.25)
            torch._foreach_add_(halves, 1.0)
            torch._foreach_add_(mixed[::-1], 2.0)
        return mixed + [base] + halves

    for got, want in zip(run("musa"), run("cpu")):
        assert got.shape == want.shape and got.dtype == want.dtype
        _assert_same(got, want)


def test_list_ops_leave_no_memory_behind():
    """A kernel alias holds its musa storage until the call ends: once the tensors
    are gone, so is their memory, however many list ops and pooled aliases saw them."""
    import gc

    def work():
        params = [torch.randn(i % 5 + 1, 4, device="musa").requires_grad_() for i in range(N)]
        opt = torch.optim.AdamW(params, lr=0.01, fused=True)
        for _ in range(2):
            for p in params:
                p.grad = torch.ones_like(p)
            opt.step()
        detached = [p.detach() for p in params]
        total = torch.cat(detached).sum() + torch.stack(torch._foreach_norm(detached)).sum()
        assert torch.isfinite(total).item()
        return torch.musa.memory_allocated()

    gc.collect()
    torch.musa.synchronize()
    base = torch.musa.memory_allocated()
    assert work() > base
    gc.collect()
    torch.musa.synchronize()
    assert torch.musa.memory_allocated() == base

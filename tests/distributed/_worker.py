"""Multi-process bodies for the mccl tests: ``python -m tests.distributed._worker SCENARIO RANK WORLD PORT OUT``.

Each scenario runs a list of named checks in one process group and writes
``{check: "ok" | error text}`` to ``OUT.rank<RANK>.json`` so the pytest side
can report every check on its own.
"""
from __future__ import annotations

import datetime
import faulthandler
import gc
import json
import os
import sys
import time
import traceback

# Before the heavy imports: dump every thread's stack just before the launcher's kill.
if os.environ.get("MCCL_TEST_DUMP_AT"):
    faulthandler.dump_traceback_later(max(0.5, float(os.environ["MCCL_TEST_DUMP_AT"]) - time.time()))

import torch

import torch_musa  # noqa: F401
import torch_musa.distributed

torch_musa.distributed.register()

import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

R = dist.ReduceOp
# Under the cuda driver a full parallel run puts dozens of CUDA processes on one GPU and
# its cores: a collective can then wait longer than 20 s for a peer that is merely slow.
TIMEOUT = datetime.timedelta(seconds=60 if os.environ.get("TORCH_MUSA_DRIVER") == "cuda" else 20)


def _dev(rank):
    return torch.device("musa", rank % torch.musa.device_count())


def _eq(got, want, what=""):
    got_c = got.detach().cpu()
    want_c = want.detach().cpu() if isinstance(want, torch.Tensor) else torch.as_tensor(want)
    if got_c.dtype.is_floating_point:
        ok = got_c.shape == want_c.shape and torch.allclose(got_c, want_c.to(got_c.dtype), atol=1e-5, rtol=1e-5)
    else:
        ok = got_c.shape == want_c.shape and torch.equal(got_c, want_c.to(got_c.dtype))
    if not ok:
        raise AssertionError(f"{what}: got {got_c.tolist()} want {want_c.tolist()}")


def _on_musa(t, dev):
    assert t.device == dev, f"result moved off {dev}: {t.device}"


# --------------------------------------------------------------------------- collectives
#: The collectives scenario's checks by name, in order (tests/distributed/test_mccl.py
#: reports each one): ``check(rank, ws, dev, vals)`` in a set-up mccl group, where rank r
#: contributes ``vals[r] == r + 1``.
COLLECTIVE_CHECKS = {}


def collective_check(name):
    def deco(fn):
        COLLECTIVE_CHECKS[name] = fn
        return fn
    return deco


@collective_check("backend_name")
def _(rank, ws, dev, vals):
    assert dist.get_backend() == "mccl", dist.get_backend()
    assert dist.is_mccl_available() and torch.musa.mccl.version() >= (1, 0, 0)
    from torch_musa.distributed import mccl
    assert set(mccl.NATIVE_OPS) == {"allreduce_", "broadcast_", "_allgather_base_",
                                    "_reduce_scatter_base_"}, mccl.NATIVE_OPS


@collective_check("all_reduce_ops")
def _(rank, ws, dev, vals):
    import math
    for op, want in [(R.SUM, sum(vals)), (R.PRODUCT, math.prod(vals)), (R.MIN, 1.0), (R.MAX, float(ws))]:
        for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64):
            t = torch.full((3, 5), vals[rank], device=dev, dtype=dt)
            ptr = t.data_ptr()
            dist.all_reduce(t, op=op)
            _on_musa(t, dev)
            assert t.data_ptr() == ptr
            _eq(t, torch.full((3, 5), want), f"all_reduce {op} {dt}")
    bits = [0b0011, 0b0101, 0b1001]
    for op, want in [(R.BAND, 0b0011 & 0b0101 & (0b1001 if ws > 2 else 0b1111)),
                     (R.BOR, 0b0011 | 0b0101 | (0b1001 if ws > 2 else 0)),
                     (R.BXOR, 0b0011 ^ 0b0101 ^ (0b1001 if ws > 2 else 0))]:
        t = torch.full((4,), bits[rank], device=dev, dtype=torch.int32)
        dist.all_reduce(t, op=op)
        _eq(t, torch.full((4,), want, dtype=torch.int32), f"all_reduce {op}")


@collective_check("all_reduce_avg")
def _(rank, ws, dev, vals):
    t = torch.full((2,), vals[rank], device=dev)
    dist.all_reduce(t, op=R.AVG)
    _eq(t, torch.full((2,), sum(vals) / ws), "AVG")


@collective_check("all_reduce_async_future")
def _(rank, ws, dev, vals):
    t = torch.full((1000,), vals[rank], device=dev)
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    assert w.wait()
    assert w.is_completed()
    val = fut.wait()
    assert isinstance(val, list) and val[0].device == dev and val[0].data_ptr() == t.data_ptr()
    _eq(t, torch.full((1000,), sum(vals)), "async all_reduce")
    _eq(chained.wait(), torch.full((1000,), 2 * sum(vals)), "future.then")


@collective_check("all_reduce_zero_copy")
def _(rank, ws, dev, vals):
    t = torch.full((1 << 18,), vals[rank], device=dev)
    torch.musa.synchronize()
    before = torch.musa.memory_allocated(dev)
    torch.musa.reset_peak_memory_stats(dev)
    dist.all_reduce(t)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    assert torch.musa.max_memory_allocated(dev) == before, "all_reduce allocated musa memory (a copy)"
    _eq(t[:4], torch.full((4,), sum(vals) * ws), "all_reduce twice")


@collective_check("all_reduce_view")
def _(rank, ws, dev, vals):
    base = torch.zeros(4, 6, device=dev)
    view = base[1:3]  # contiguous view with a storage offset
    view.fill_(vals[rank])
    dist.all_reduce(view)
    _eq(base[1:3], torch.full((2, 6), sum(vals)), "view")
    _eq(base[0], torch.zeros(6), "outside view")


@collective_check("broadcast")
def _(rank, ws, dev, vals):
    src = ws - 1
    t = torch.arange(6, device=dev, dtype=torch.float32) * (rank + 1)
    dist.broadcast(t, src=src)
    _eq(t, torch.arange(6) * (src + 1), "broadcast")
    t = torch.full((3,), rank, device=dev, dtype=torch.int64)
    w = dist.broadcast(t, src=0, async_op=True)
    w.wait()
    _eq(t, torch.zeros(3, dtype=torch.int64), "async broadcast")


@collective_check("reduce")
def _(rank, ws, dev, vals):
    dst = 1
    t = torch.full((5,), vals[rank], device=dev)
    dist.reduce(t, dst=dst, op=R.SUM)
    if rank == dst:
        _eq(t, torch.full((5,), sum(vals)), "reduce")
    t = torch.full((5,), vals[rank], device=dev)
    dist.reduce(t, dst=0, op=R.MAX, async_op=True).wait()
    if rank == 0:
        _eq(t, torch.full((5,), float(ws)), "reduce max")


@collective_check("premul_sum")
def _(rank, ws, dev, vals):
    # PREMUL_SUM(f): every rank's input times f, then SUM; f a float or a 1-element tensor
    for f in (2.5, torch.tensor([0.5], device=dev), torch.tensor(3.0)):
        fv = float(f)
        want = fv * sum(vals)
        op = dist._make_nccl_premul_sum(f)
        for dt in (torch.float32, torch.float64, torch.bfloat16):
            t = torch.full((3, 4), vals[rank], device=dev, dtype=dt)
            dist.all_reduce(t, op=op)
            _on_musa(t, dev)
            _eq(t, torch.full((3, 4), want), f"all_reduce premul {fv} {dt}")
        t = torch.full((7,), vals[rank], device=dev)
        w = dist.all_reduce(t, op=op, async_op=True)
        w.wait()
        _eq(w.get_future().value()[0], torch.full((7,), want), "all_reduce premul async")
        # reduce: the root gets the scaled sum, the other ranks' inputs stay as they were
        t = torch.full((5,), vals[rank], device=dev)
        dist.reduce(t, dst=ws - 1, op=op)
        _eq(t, torch.full((5,), want if rank == ws - 1 else vals[rank]), "reduce premul")
        t = torch.full((5,), vals[rank], device=dev)
        dist.reduce(t, dst=0, op=op, async_op=True).wait()
        _eq(t, torch.full((5,), want if rank == 0 else vals[rank]), "reduce premul async")
        # reduce_scatter_tensor: rank r gets f * sum over ranks of their chunk r; input untouched
        inp = torch.stack([torch.full((2,), vals[rank] * (c + 1)) for c in range(ws)]).reshape(-1).to(dev)
        before = inp.cpu().clone()
        out = torch.empty(2, device=dev)
        dist.reduce_scatter_tensor(out, inp, op=op)
        _eq(out, torch.full((2,), want * (rank + 1)), "reduce_scatter_tensor premul")
        _eq(inp, before, "reduce_scatter_tensor premul input")
        out = torch.empty(2, device=dev)
        dist.reduce_scatter_tensor(out, inp, op=op, async_op=True).wait()
        _eq(out, torch.full((2,), want * (rank + 1)), "reduce_scatter_tensor premul async")
        # reduce_scatter (lists)
        ins = [torch.full((3,), vals[rank] * (c + 1), device=dev) for c in range(ws)]
        out = torch.empty(3, device=dev)
        dist.reduce_scatter(out, ins, op=op)
        _eq(out, torch.full((3,), want * (rank + 1)), "reduce_scatter premul")
        _eq(ins[0], torch.full((3,), vals[rank]), "reduce_scatter premul input")


@collective_check("all_gather")
def _(rank, ws, dev, vals):
    t = torch.full((2, 3), vals[rank], device=dev)
    outs = [torch.empty(2, 3, device=dev) for _ in range(ws)]
    dist.all_gather(outs, t)
    for r in range(ws):
        _on_musa(outs[r], dev)
        _eq(outs[r], torch.full((2, 3), vals[r]), f"all_gather[{r}]")
    outs = [torch.empty(2, 3, device=dev) for _ in range(ws)]
    w = dist.all_gather(outs, t, async_op=True)
    got = w.get_future().wait()
    assert got[0][0].device == dev
    for r in range(ws):
        _eq(outs[r], torch.full((2, 3), vals[r]), f"async all_gather[{r}]")


@collective_check("all_gather_into_tensor")
def _(rank, ws, dev, vals):
    t = torch.full((3,), vals[rank], device=dev)
    out = torch.empty(ws * 3, device=dev)
    dist.all_gather_into_tensor(out, t)
    _eq(out, torch.tensor(vals).repeat_interleave(3), "all_gather_into_tensor")
    out2 = torch.empty(ws, 3, device=dev)
    w = dist.all_gather_into_tensor(out2, t, async_op=True)
    assert w.get_future().wait()[0].data_ptr() == out2.data_ptr()
    _eq(out2, torch.tensor(vals).repeat_interleave(3).view(ws, 3), "stacked")


@collective_check("reduce_scatter")
def _(rank, ws, dev, vals):
    ins = [torch.full((4,), vals[rank] * (i + 1), device=dev) for i in range(ws)]
    out = torch.empty(4, device=dev)
    dist.reduce_scatter(out, ins)
    _eq(out, torch.full((4,), sum(vals) * (rank + 1)), "reduce_scatter")
    out = torch.empty(4, device=dev)
    dist.reduce_scatter(out, ins, op=R.MAX, async_op=True).wait()
    _eq(out, torch.full((4,), float(ws) * (rank + 1)), "async reduce_scatter max")


@collective_check("reduce_scatter_tensor")
def _(rank, ws, dev, vals):
    inp = torch.arange(ws * 2, device=dev, dtype=torch.float32) + rank
    out = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(out, inp)
    full = sum(torch.arange(ws * 2, dtype=torch.float32) + r for r in range(ws))
    _eq(out, full[rank * 2:(rank + 1) * 2], "reduce_scatter_tensor")
    out = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(out, inp, async_op=True).wait()
    _eq(out, full[rank * 2:(rank + 1) * 2], "async reduce_scatter_tensor")


@collective_check("all_to_all")
def _(rank, ws, dev, vals):
    ins = [torch.full((2,), rank * 10 + j, device=dev, dtype=torch.int64) for j in range(ws)]
    outs = [torch.empty(2, device=dev, dtype=torch.int64) for _ in range(ws)]
    dist.all_to_all(outs, ins)
    for j in range(ws):
        _eq(outs[j], torch.full((2,), j * 10 + rank), f"all_to_all[{j}]")
    outs = [torch.empty(2, device=dev, dtype=torch.int64) for _ in range(ws)]
    dist.all_to_all(outs, ins, async_op=True).wait()
    for j in range(ws):
        _eq(outs[j], torch.full((2,), j * 10 + rank), f"async all_to_all[{j}]")


@collective_check("all_to_all_single")
def _(rank, ws, dev, vals):
    inp = torch.arange(ws, device=dev, dtype=torch.float32) + rank * 100
    out = torch.empty(ws, device=dev)
    dist.all_to_all_single(out, inp)
    _eq(out, torch.tensor([r * 100 + rank for r in range(ws)], dtype=torch.float32), "a2a single")
    # uneven: rank r sends (j+1) elements to rank j
    in_splits = [j + 1 for j in range(ws)]
    out_splits = [rank + 1] * ws
    inp = torch.cat([torch.full((j + 1,), rank * 10 + j, dtype=torch.float32) for j in range(ws)]).to(dev)
    out = torch.empty(sum(out_splits), device=dev)
    dist.all_to_all_single(out, inp, out_splits, in_splits, async_op=True).wait()
    want = torch.cat([torch.full((rank + 1,), r * 10 + rank, dtype=torch.float32) for r in range(ws)])
    _eq(out, want, "a2a uneven")


@collective_check("gather_scatter")
def _(rank, ws, dev, vals):
    t = torch.full((3,), vals[rank], device=dev)
    gl = [torch.empty(3, device=dev) for _ in range(ws)] if rank == 0 else None
    dist.gather(t, gl, dst=0)
    if rank == 0:
        for r in range(ws):
            _eq(gl[r], torch.full((3,), vals[r]), f"gather[{r}]")
    out = torch.empty(2, device=dev)
    sl = [torch.full((2,), 7.0 + r, device=dev) for r in range(ws)] if rank == ws - 1 else None
    dist.scatter(out, sl, src=ws - 1)
    _eq(out, torch.full((2,), 7.0 + rank), "scatter")
    out = torch.empty(2, device=dev)
    dist.scatter(out, sl, src=ws - 1, async_op=True).wait()
    _eq(out, torch.full((2,), 7.0 + rank), "async scatter")


@collective_check("send_recv")
def _(rank, ws, dev, vals):
    nxt, prv = (rank + 1) % ws, (rank - 1) % ws
    s = torch.full((4,), vals[rank], device=dev)
    r = torch.empty(4, device=dev)
    if rank % 2 == 0:
        dist.send(s, nxt)
        dist.recv(r, prv)
    else:
        dist.recv(r, prv)
        dist.send(s, nxt)
    _eq(r, torch.full((4,), vals[prv]), "send/recv")
    r2 = torch.empty(4, device=dev)
    ws_ = [dist.isend(s * 2, nxt), dist.irecv(r2, prv)]
    for w in ws_:
        w.wait()
    _eq(r2, torch.full((4,), 2 * vals[prv]), "isend/irecv")
    r3 = torch.empty(4, device=dev)
    ops = [dist.P2POp(dist.isend, s * 3, nxt), dist.P2POp(dist.irecv, r3, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    _eq(r3, torch.full((4,), 3 * vals[prv]), "batch_isend_irecv")


@collective_check("barrier")
def _(rank, ws, dev, vals):
    dist.barrier()
    w = dist.barrier(async_op=True)
    w.wait()
    assert w.is_completed()
    dist.barrier(device_ids=[dev.index])


@collective_check("object_collectives")
def _(rank, ws, dev, vals):
    objs = [{"rank": rank, "x": [1, 2]}, "s"] if rank == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0)
    assert objs == [{"rank": 0, "x": [1, 2]}, "s"], objs
    got = [None] * ws
    dist.all_gather_object(got, ("r", rank))
    assert got == [("r", r) for r in range(ws)], got


@collective_check("new_group_subgroups")
def _(rank, ws, dev, vals):
    g = dist.new_group([0, 1])
    if rank in (0, 1):
        t = torch.full((2,), vals[rank], device=dev)
        dist.all_reduce(t, group=g)
        _eq(t, torch.full((2,), vals[0] + vals[1]), "new_group all_reduce")
        assert dist.get_world_size(g) == 2
    sub, subs = dist.new_subgroups(group_size=1)
    t = torch.full((2,), vals[rank], device=dev)
    dist.all_reduce(t, group=sub)
    _eq(t, torch.full((2,), vals[rank]), "subgroup of one")
    if ws == 3:
        sub, _ = dist.new_subgroups_by_enumeration([[0, 2], [1]])
        t = torch.full((2,), vals[rank], device=dev)
        dist.all_reduce(t, group=sub)
        want = vals[0] + vals[2] if rank in (0, 2) else vals[1]
        _eq(t, torch.full((2,), want), "subgroups by enumeration")


@collective_check("local_dtype_mismatch")
def _(rank, ws, dev, vals):
    out = torch.empty(ws * 3, device=dev, dtype=torch.float64)
    try:
        dist.all_gather_into_tensor(out, torch.ones(3, device=dev))
    except Exception as e:  # noqa: BLE001
        assert "dtype" in str(e).lower(), e
    else:
        raise AssertionError("dtype mismatch accepted")
    dist.barrier()


@collective_check("cpu_tensor_rejected_clearly")
def _(rank, ws, dev, vals):
    # like nccl: a group created with "mccl" serves musa tensors only
    try:
        dist.all_reduce(torch.ones(2))
    except Exception as e:  # noqa: BLE001
        assert "cpu" in str(e).lower(), e
    else:
        raise AssertionError("cpu tensor accepted by a musa-only group")


def collectives(rank, ws):
    dev = _dev(rank)
    torch.musa.set_device(dev)
    dist.init_process_group("mccl", rank=rank, world_size=ws, timeout=TIMEOUT)
    vals = [float(r + 1) for r in range(ws)]  # rank r contributes r+1
    results = {}
    for name, fn in COLLECTIVE_CHECKS.items():
        t0 = time.monotonic()
        try:
            fn(rank, ws, dev, vals)
            results[name] = "ok"
        except Exception:  # noqa: BLE001
            results[name] = traceback.format_exc()[-3000:]
        try:
            dist.barrier()
        except Exception:  # noqa: BLE001
            pass
        if os.environ.get("MCCL_TEST_TIMES"):
            results[f"__time_{name}"] = round(time.monotonic() - t0, 2)
    dist.destroy_process_group()
    return results


# --------------------------------------------------------------------------- init variants
def init_variants(rank, ws):
    dev = _dev(rank)
    results = {}
    base_port = int(os.environ["MASTER_PORT"])

    def run(name, fn):
        try:
            fn()
            results[name] = "ok"
        except Exception:  # noqa: BLE001
            results[name] = traceback.format_exc()[-3000:]
        if dist.is_initialized():
            dist.destroy_process_group()

    def device_id():
        os.environ["MASTER_PORT"] = str(base_port + 1)
        dist.init_process_group(rank=rank, world_size=ws, timeout=TIMEOUT, device_id=dev)
        assert dist.get_backend() == "mccl", dist.get_backend()
        t = torch.full((2,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        _eq(t, torch.full((2,), float(sum(range(1, ws + 1)))), "device_id all_reduce")
        g = dist.new_group([0, 1])
        t = torch.ones(2, device=dev)
        dist.all_reduce(t, group=g)
        _eq(t, torch.full((2,), 2.0), "device_id new_group")
        dist.barrier()

    def mixed():
        os.environ["MASTER_PORT"] = str(base_port + 2)
        dist.init_process_group("cpu:gloo,musa:mccl", rank=rank, world_size=ws, timeout=TIMEOUT)
        c = torch.full((2,), float(rank + 1))
        m = torch.full((2,), float(rank + 1), device=dev)
        dist.all_reduce(c)
        dist.all_reduce(m)
        want = torch.full((2,), float(sum(range(1, ws + 1))))
        _eq(c, want, "cpu via gloo")
        _eq(m, want, "musa via mccl")
        assert c.device.type == "cpu" and m.device == dev
        objs = [None]
        if rank == 0:
            objs = ["hello"]
        dist.broadcast_object_list(objs, src=0)
        assert objs == ["hello"]

    def env_init():
        os.environ["MASTER_PORT"] = str(base_port + 3)
        dist.init_process_group(backend="mccl", init_method="env://", rank=rank, world_size=ws)
        t = torch.ones(1, device=dev)
        dist.all_reduce(t)
        _eq(t, torch.full((1,), float(ws)), "env init")

    run("init_device_id", device_id)
    run("init_cpu_gloo_musa_mccl", mixed)
    run("init_env", env_init)
    return results


# --------------------------------------------------------------------------- DDP parity
def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def _batches(steps, n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g)) for _ in range(steps)]


def _sync_batch_norm(rank, ws, dev):
    """nn.SyncBatchNorm under DDP, each rank half the batch (of other sizes: 3 and 5
    samples), == BatchNorm in one process over the whole batch: outputs, parameter
    gradients and running statistics, over two steps."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))

    g = torch.Generator().manual_seed(2)
    sizes = [3, 5, 4, 2][:ws]
    xs = [torch.randn(sum(sizes), 3, 6, 6, generator=g) for _ in range(2)]
    lo, hi = sum(sizes[:rank]), sum(sizes[:rank + 1])
    model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(net()).to(dev), device_ids=[dev.index])
    ref = net().to(dev)
    for x in xs:
        for p in list(model.parameters()) + list(ref.parameters()):
            p.grad = None
        out = model(x[lo:hi].to(dev))
        # the loss of the whole batch is the sum over ranks; DDP averages gradients over ws
        (out.square().sum() * ws).backward()
        r = ref(x.to(dev))
        r.square().sum().backward()
        torch.testing.assert_close(out.detach().cpu(), r[lo:hi].detach().cpu(), rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-4, msg=name)
    sbn, bn = model.module[1], ref[1]
    assert isinstance(sbn, nn.SyncBatchNorm) and sbn.weight.device == dev
    torch.testing.assert_close(sbn.running_mean.cpu(), bn.running_mean.cpu(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sbn.running_var.cpu(), bn.running_var.cpu(), rtol=1e-5, atol=1e-6)


def ddp(rank, ws):
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _dev(rank)
    torch.musa.set_device(dev)
    dist.init_process_group("mccl", rank=rank, world_size=ws, timeout=TIMEOUT)
    results = {}
    try:
        steps, n = 5, 8 * ws
        data = _batches(steps, n)
        model = DDP(_mlp().to(dev), device_ids=[dev.index], bucket_cap_mb=0.0001)  # several buckets
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        per = n // ws
        for x, y in data:
            xs, ys = x[rank * per:(rank + 1) * per].to(dev), y[rank * per:(rank + 1) * per].to(dev)
            opt.zero_grad()
            nn.functional.mse_loss(model(xs), ys).backward()
            opt.step()
        for p in model.parameters():
            assert p.device == dev and p.grad.device == dev
        # reference: one process, the full batch
        ref = _mlp().to(dev)
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        for x, y in data:
            ropt.zero_grad()
            nn.functional.mse_loss(ref(x.to(dev)), y.to(dev)).backward()
            ropt.step()
        for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
            if not torch.allclose(p.detach().cpu(), q.detach().cpu(), atol=1e-5, rtol=1e-4):
                raise AssertionError(f"{name}: max diff {(p.detach().cpu() - q.detach().cpu()).abs().max()}")
        # params identical across ranks
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(ws)]
        dist.all_gather(gathered, flat)
        for g in gathered:
            assert torch.equal(g.cpu(), flat.cpu())
        results["ddp_parity"] = "ok"
    except Exception:  # noqa: BLE001
        results["ddp_parity"] = traceback.format_exc()[-3000:]
    try:
        _sync_batch_norm(rank, ws, dev)
        results["sync_batch_norm"] = "ok"
    except Exception:  # noqa: BLE001
        results["sync_batch_norm"] = traceback.format_exc()[-3000:]
    dist.destroy_process_group()
    return results


# --------------------------------------------------------------------------- FSDP2
class _Block(nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class _TinyLM(nn.Module):
    def __init__(self, vocab=32, d=16, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def fsdp2(rank, ws):
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard

    dev = _dev(rank)
    torch.musa.set_device(dev)
    dist.init_process_group("mccl", rank=rank, world_size=ws, timeout=TIMEOUT)
    results = {}
    try:  # functional collectives (DTensor's path): wait through the C++ work registry
        import torch.distributed._functional_collectives as fc
        t = torch.full((3,), float(rank + 1), device=dev)
        out = fc.wait_tensor(fc.all_reduce(t, "sum", dist.group.WORLD))
        _eq(out, torch.full((3,), float(sum(range(1, ws + 1)))), "functional all_reduce")
        g = fc.all_gather_tensor(t, 0, dist.group.WORLD)
        gc.collect()  # the registry's work must outlive its Python wrappers (a hang once did not)
        _eq(g, torch.tensor([float(r + 1) for r in range(ws)]).repeat_interleave(3), "functional all_gather")
        rs = fc.reduce_scatter_tensor(torch.ones(ws * 2, device=dev), "sum", 0, dist.group.WORLD)
        gc.collect()
        rs = fc.wait_tensor(rs)
        _eq(rs, torch.full((2,), float(ws)), "functional reduce_scatter")
        results["functional_collectives"] = "ok"
    except Exception:  # noqa: BLE001
        results["functional_collectives"] = traceback.format_exc()[-3000:]
    try:
        mesh = init_device_mesh("musa", (ws,))
        torch.manual_seed(0)
        model = _TinyLM().to(dev)
        torch.manual_seed(0)
        ref = _TinyLM().to(dev)
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(2)
        for _ in range(2):
            idx = torch.randint(0, 32, (2 * ws, 6), generator=g)
            tgt = torch.randint(0, 32, (2 * ws, 6), generator=g)
            mine = slice(rank * 2, rank * 2 + 2)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(idx[mine].to(dev)).flatten(0, 1), tgt[mine].to(dev).flatten())
            loss.backward()
            opt.step()
            ropt.zero_grad()
            nn.functional.cross_entropy(ref(idx.to(dev)).flatten(0, 1), tgt.to(dev).flatten()).backward()
            ropt.step()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            full = p.full_tensor() if hasattr(p, "full_tensor") else p
            assert full.device.type == "musa", full.device
            if not torch.allclose(full.detach().cpu(), q.detach().cpu(), atol=1e-4, rtol=1e-3):
                raise AssertionError(f"{name}: max diff {(full.detach().cpu() - q.detach().cpu()).abs().max()}")
        results["fsdp2_parity"] = "ok"
    except Exception:  # noqa: BLE001
        results["fsdp2_parity"] = traceback.format_exc()[-3000:]
    dist.destroy_process_group()
    return results


# --------------------------------------------------------------------------- faults
def faults(rank, ws):
    """Rank 1 never joins an all_reduce, then exits; rank 0 must raise in time, naming the op."""
    dev = _dev(rank)
    timeout_s = float(os.environ.get("MCCL_TEST_TIMEOUT", "3"))
    # The short timeout is the collectives'; the rendezvous gets a long one, since on a
    # loaded machine (16 launches on one GPU) the peer can take longer than it to start.
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), ws, rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("mccl", store=store, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=timeout_s))
    results = {}
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)  # healthy first
    if rank != 0:
        time.sleep(timeout_s + 1.5)  # never joins the broadcast below
        os._exit(0)  # then dies without cleanup

    def expect_raise(name, fn, limit):
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            dt = time.monotonic() - t0
            msg = str(e)
            if name not in msg:
                results[f"fault_{name}"] = f"error does not name {name}: {msg[:500]}"
            elif dt > limit:
                results[f"fault_{name}"] = f"raised after {dt:.1f}s > {limit}s"
            else:
                results[f"fault_{name}"] = "ok"
            results[f"fault_{name}_msg"] = msg[:400]
            return
        results[f"fault_{name}"] = "no error raised"

    expect_raise("broadcast", lambda: dist.broadcast(t, src=0), timeout_s + 3)
    time.sleep(1.0)  # let the peer exit
    expect_raise("all_reduce", lambda: dist.all_reduce(t, async_op=True).wait(), timeout_s + 3)
    os._exit(_write(results))


def mismatch(rank, ws):
    """Ranks pass different sizes / dtypes: a clear error, not a hang or silent garbage."""
    dev = _dev(rank)
    dist.init_process_group("mccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=3))
    results = {}
    t0 = time.monotonic()
    t = torch.ones(4 if rank == 0 else 8, device=dev)
    try:
        dist.all_reduce(t)
        results["mismatch_shape"] = "no error raised"
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        ok = "all_reduce" in msg and ("shape" in msg or "size" in msg)
        results["mismatch_shape"] = "ok" if ok and time.monotonic() - t0 < 8 else f"unclear: {msg[:600]}"
        results["mismatch_shape_msg"] = msg[:600]
    # same byte count, different dtypes: Gloo alone would mix float32 and int32 bits silently
    t = torch.ones(4, device=dev, dtype=torch.float32 if rank == 0 else torch.int32)
    try:
        dist.all_reduce(t)
        results["mismatch_dtype"] = "no error raised"
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        ok = "all_reduce" in msg and "dtype" in msg.lower()
        results["mismatch_dtype"] = "ok" if ok else f"unclear: {msg[:600]}"
    # same element count, other shape; a different collective; broadcast / all_gather_into_tensor sizes
    cases = {
        "mismatch_reshape": lambda: dist.all_reduce(torch.ones((2, 4) if rank == 0 else (4, 2), device=dev)),
        "mismatch_collective": lambda: (dist.all_reduce(torch.ones(4, device=dev)) if rank == 0 else
                                        dist.broadcast(torch.ones(4, device=dev), src=0)),
        "mismatch_broadcast": lambda: dist.broadcast(torch.ones(4 + rank, device=dev), src=0),
        "mismatch_all_gather_into_tensor": lambda: dist.all_gather_into_tensor(
            torch.empty(ws * (3 + rank), device=dev), torch.ones(3 + rank, device=dev)),
        "mismatch_reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(
            torch.empty(2, device=dev, dtype=torch.float32 if rank else torch.float64),
            torch.ones(2 * ws, device=dev, dtype=torch.float32 if rank else torch.float64)),
        "mismatch_reduce": lambda: dist.reduce(torch.ones(4 + rank, device=dev), dst=0),
        "mismatch_all_gather": lambda: dist.all_gather([torch.empty(3 + rank, device=dev) for _ in range(ws)],
                                                       torch.ones(3 + rank, device=dev)),
        "mismatch_async": lambda: dist.all_reduce(torch.ones(5 + rank, device=dev), async_op=True).wait(),
    }
    for name, fn in cases.items():
        t0 = time.monotonic()
        try:
            fn()
            results[name] = "no error raised"
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            ok = ("rank 0" in msg and "rank 1" in msg and "shapes/dtypes" in msg
                  and time.monotonic() - t0 < 8)
            results[name] = "ok" if ok else f"unclear: {msg[:600]}"
            results[name + "_msg"] = msg[:600]
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)  # the group still works afterwards
    results["mismatch_then_ok"] = "ok" if torch.equal(t.cpu(), torch.full((4,), 2.0)) else str(t)
    # a verified signature costs no further check: the store is not touched again
    from torch_musa.distributed.mccl import signature
    g = signature.GROUPS.get("0") or next(iter(signature.GROUPS.values()), None)
    if os.environ.get("MCCL_CHECK_COLLECTIVES", "first") == "first":
        n = g.n
        for _ in range(5):
            dist.all_reduce(t)
        results["mismatch_verified_once"] = "ok" if g.n == n else f"checked again: {n} -> {g.n}"
    else:
        results["mismatch_verified_once"] = "ok"
    os._exit(_write(results))


def p2p_peers(rank, ws):
    """Point-to-point calls naming a peer outside the group (or this rank, which Gloo cannot
    reach): a ValueError naming the peer and the allowed ranks at once, on every rank that
    asked; nothing reaches Gloo, so the group keeps working."""
    dev = _dev(rank)
    dist.init_process_group("mccl", rank=rank, world_size=ws, timeout=TIMEOUT)
    results = {}
    t = torch.ones(4, device=dev)
    sub = dist.new_group([0, 2])  # global ranks 0 and 2 are its ranks 0 and 1

    def expect(name, fn, *words):
        t0 = time.monotonic()
        try:
            w = fn()
            for x in (w if isinstance(w, list) else [w]):
                if x is not None:
                    x.wait()
            results[name] = "no error raised"
            return
        except ValueError as e:
            msg, dt = str(e), time.monotonic() - t0
            missing = [x for x in words if x not in msg]
            results[name] = (f"does not name {missing}: {msg[:400]}" if missing else
                             f"raised after {dt:.1f}s" if dt > 2 else "ok")
        except Exception as e:  # noqa: BLE001
            results[name] = f"{type(e).__name__}, not a ValueError: {str(e)[:400]}"

    cases = {
        "p2p_send_outside": (lambda: dist.send(t, ws), f"destination rank {ws}", f"[0, {ws})"),
        "p2p_recv_outside": (lambda: dist.recv(t, ws + 1), f"source rank {ws + 1}", f"[0, {ws})"),
        "p2p_isend_outside": (lambda: dist.isend(t, 5), "destination rank 5", f"[0, {ws})"),
        "p2p_irecv_negative": (lambda: dist.irecv(t, -1), "source rank -1", f"[0, {ws})"),
        "p2p_batch_outside": (lambda: dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 7)]),
                              "destination rank 7", f"[0, {ws})"),
        "p2p_recv_self": (lambda: dist.recv(t, rank), f"source rank {rank}", "this rank"),
        "p2p_isend_self": (lambda: dist.isend(t, rank), f"destination rank {rank}", "this rank"),
    }
    if rank in (0, 2):  # group-relative peers on a subgroup
        cases.update({
            # a global rank outside the subgroup: torch.distributed's own error
            "p2p_subgroup_global_outside": (lambda: dist.send(t, 1, group=sub), "Global rank 1"),
            "p2p_subgroup_group_dst": (lambda: dist.isend(t, group=sub, group_dst=2),
                                       "destination rank 2", "[0, 2)", "global ranks [0, 2]"),
            "p2p_subgroup_p2pop": (lambda: dist.batch_isend_irecv(
                [dist.P2POp(dist.irecv, t, group=sub, group_peer=3)]), "Group rank 3"),
        })
    for name, (fn, *words) in cases.items():
        expect(name, fn, *words)
    try:  # the group still works: a ring of sends, then an all_reduce
        nxt, prv = (rank + 1) % ws, (rank - 1) % ws
        r = torch.empty(4, device=dev)
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, t * (rank + 1), nxt),
                                         dist.P2POp(dist.irecv, r, prv)]):
            w.wait()
        _eq(r, torch.full((4,), float(prv + 1)), "ring")
        dist.all_reduce(t)
        _eq(t, torch.full((4,), float(ws)), "all_reduce")
        results["p2p_group_still_works"] = "ok"
    except Exception:  # noqa: BLE001
        results["p2p_group_still_works"] = traceback.format_exc()[-2000:]
    return results


def stalled(rank, ws):
    """MCCL_CHECK_COLLECTIVES=first: rank 0 makes a call whose signature was verified before
    (it goes to the engine unchecked) while the others call a new one. Every rank raises
    within seconds (not the 15 s timeout), naming the two calls that differ, and the group
    stays usable (the others join rank 0's call with placeholder tensors)."""
    dev = _dev(rank)
    dist.init_process_group("mccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=15))
    results = {}
    ones = lambda *shape: torch.ones(*shape, device=dev)  # noqa: E731
    dist.all_reduce(ones(4))  # verified: all_reduce(SUM) [(4,):float32], broadcast(root=0) [(3,):float32]
    dist.broadcast(ones(3), src=0)
    cases = {
        # (rank 0's verified call, the others' new call, the words every rank's error holds)
        "stalled_all_reduce": (lambda: dist.all_reduce(ones(4)), lambda: dist.all_reduce(ones(8)),
                               ["rank 0: all_reduce(SUM) [(4,):float32] (a signature verified before",
                                "all_reduce(SUM) [(8,):float32]"]),
        "stalled_async_broadcast": (lambda: dist.broadcast(ones(3), src=0, async_op=True).wait(),
                                    lambda: dist.all_reduce(ones(5), op=R.MAX),
                                    ["rank 0: broadcast(root=0) [(3,):float32] (a signature verified before",
                                     "all_reduce(MAX) [(5,):float32]"]),
        "stalled_python_kernel_new": (lambda: dist.all_reduce(ones(4)),
                                      lambda: dist.all_to_all_single(torch.empty(2 * ws, device=dev), ones(2 * ws)),
                                      ["rank 0: all_reduce(SUM) [(4,):float32] (a signature verified before",
                                       "all_to_all_single() [float32]"]),
    }
    for name, (verified, new, words) in cases.items():
        t0 = time.monotonic()
        try:
            (verified if rank == 0 else new)()
            results[name] = "no error raised"
        except Exception as e:  # noqa: BLE001
            msg, dt = str(e), time.monotonic() - t0
            missing = [w for w in words + ["stays usable"] if w not in msg]
            results[name] = (f"does not name {missing}: {msg[:800]}" if missing else
                             f"raised after {dt:.1f}s" if dt > 6 else "ok")
            results[name + "_msg"] = msg[:800]
        try:  # the group still works, verified and new signatures alike
            t = torch.full((4,), float(rank + 1), device=dev)
            dist.all_reduce(t)
            _eq(t, torch.full((4,), float(sum(range(1, ws + 1)))), "all_reduce after")
            g = torch.empty(ws * 2, device=dev)
            dist.all_gather_into_tensor(g, torch.full((2,), float(rank), device=dev))
            _eq(g, torch.arange(ws, dtype=torch.float32).repeat_interleave(2), "all_gather after")
        except Exception:  # noqa: BLE001
            results[name] = f"group unusable after {name}: {traceback.format_exc()[-1500:]}"
    return results


def lonely(rank, ws):
    """Rank 1 never joins: init_process_group on rank 0 raises within the timeout."""
    if rank != 0:
        os._exit(0)
    results = {}
    t0 = time.monotonic()
    try:
        dist.init_process_group("mccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=2))
        results["fault_never_joins"] = "init returned without the peer"
    except Exception as e:  # noqa: BLE001
        dt = time.monotonic() - t0
        results["fault_never_joins"] = "ok" if dt < 8 else f"raised after {dt:.1f}s"
        results["fault_never_joins_msg"] = str(e)[:400]
    return results


SCENARIOS = {"lonely": lonely, "collectives": collectives, "init": init_variants, "ddp": ddp, "fsdp2": fsdp2,
             "faults": faults, "mismatch": mismatch, "p2p_peers": p2p_peers,
             "stalled": stalled}
# port offsets so that scenarios chained in one launch ("collectives+ddp") never share a store
_PORT_OFFSET = {"collectives": 0, "init": 10, "ddp": 20, "fsdp2": 30, "faults": 0, "mismatch": 0, "lonely": 0,
                "p2p_peers": 0, "stalled": 0}
_OUT = None


def _write(results):
    with open(_OUT, "w") as f:
        json.dump(results, f)
    return 0


def main():
    global _OUT
    scenario, rank, ws, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(ws))
    _OUT = f"{out}.rank{rank}.json"
    results = {}
    for name in scenario.split("+"):
        t0 = time.monotonic()
        os.environ["MASTER_PORT"] = str(int(port) + _PORT_OFFSET[name])
        try:
            results.update(SCENARIOS[name](rank, ws))
        except Exception:  # noqa: BLE001
            results[f"__{name}__"] = traceback.format_exc()[-3000:]
        if dist.is_initialized():
            dist.destroy_process_group()
        results[f"__time_{name}"] = round(time.monotonic() - t0, 2)
        _write(results)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

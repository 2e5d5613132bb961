"""The mccl backend: every collective on musa tensors across 2 and 3 processes,
init variants, DDP and FSDP2 parity, faults, cross-rank mismatches.

Each multi-process launch runs many named checks in one set of processes
(tests/distributed/_worker.py); the tests below report them one by one.
"""
from __future__ import annotations

import functools
import os
import sys
import tempfile

import pytest
import torch
import torch.distributed as dist

import torch_musa
import torch_musa.distributed
from tests.distributed import _worker, launch
from torch_musa.config import CONFIG
from torch_musa.distributed import _C as mccl_C
from torch_musa.distributed import mccl
from torch_musa.distributed.mccl import kernels, works

torch_musa.distributed.register()

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")

COLLECTIVE_CHECKS = list(_worker.COLLECTIVE_CHECKS)  # the collectives scenario's checks


# Every Gloo call staged through host copies: the path the cuda driver takes when ranks
# share a GPU (Gloo cannot read GPU memory), forced on the host driver.
STAGED = (("MCCL_STAGE_GLOO", "1"),)


@functools.lru_cache(maxsize=None)
def _run(scenario: str, world: int, env: tuple = ()):
    # Under the cuda driver every rank starts CUDA and stages Gloo calls through host copies
    # on one shared GPU: slower, and one staged launch overran 100 s among 8 test workers.
    limit = 100 if CONFIG.driver == "host" else 300
    results, elapsed, logs = launch.launch(scenario, world, timeout=limit, env=dict(env))
    return results, logs


def _check(scenario, world, name, ranks=None, env=()):
    results, logs = _run(scenario, world, env)
    ranks = range(world) if ranks is None else ranks
    for r in ranks:
        res = results[r]
        if res is None:
            pytest.fail(f"rank {r} of {scenario} wrote no result:\n{logs[r][-4000:]}")
        for k, v in res.items():
            if k.startswith("__") and not k.startswith("__time"):
                pytest.fail(f"rank {r} of {scenario}: {k}\n{v}")
        assert name in res, f"rank {r}: check {name} did not run ({sorted(res)})\n{logs[r][-2000:]}"
        assert res[name] == "ok", f"rank {r}, {name}:\n{res[name]}"
    return results


# --------------------------------------------------------------------------- in process
def test_registration():
    assert "mccl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["musa"] == "mccl"
    assert dist.Backend.backend_capability["mccl"] == ["musa"]
    assert dist.is_mccl_available() is True
    assert dist.is_backend_available("mccl")
    v = torch.musa.mccl.version()
    assert isinstance(v, tuple) and len(v) == 3 and all(isinstance(x, int) for x in v)
    if torch_musa.distributed.mccl.engine() == "nccl":
        assert v == tuple(torch.cuda.nccl.version()[:3])
    else:
        assert v == torch_musa.distributed.mccl.VERSION
    assert torch.musa.mccl.is_available([torch.ones(1, device="musa")])
    assert not torch.musa.mccl.is_available([torch.ones(1)])
    torch_musa.distributed.register()  # idempotent
    assert dist.Backend.backend_list.count("mccl") == 1


def _musa_kernel_file(op):
    """Where the dispatcher's musa (PrivateUse1) kernel of ``c10d::<op>`` was registered."""
    dump = torch._C._dispatch_dump(f"c10d::{op}")
    (line,) = [ln for ln in dump.splitlines() if ln.startswith("PrivateUse1: registered at ")]
    return line.split("registered at ", 1)[1].split(":", 1)[0]


def test_each_collective_has_one_musa_kernel():
    """The hot collectives are the C++ kernels; every other op is a Python kernel, and no
    op has both (the Python ones would override the C++ ones)."""
    hot = {"allreduce_", "broadcast_", "_allgather_base_", "_reduce_scatter_base_"}
    assert set(mccl.NATIVE_OPS) == set(torch.ops.mccl.native_ops()) == hot
    assert not hot & set(kernels.KERNELS)
    for op in hot:
        assert _musa_kernel_file(op).endswith("distributed/csrc/mccl_ops.cpp"), op
    python_ops = [op for op in kernels.KERNELS if hasattr(torch.ops.c10d, op)]
    assert {"alltoall_base_", "gather_", "send", "barrier"} <= set(python_ops)
    for op in python_ops:
        assert _musa_kernel_file(op) == kernels.__file__, op


def test_engine_choice(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    if CONFIG.driver == "host":
        assert mccl.engine(2, "auto") == mccl.engine(2, "gloo") == "gloo"
        with pytest.raises(mccl.MCCLError, match="MCCL_ENGINE=nccl needs the cuda driver"):
            mccl.engine(2, "nccl")
    else:  # one rank per GPU: NCCL; more ranks than GPUs on this host: Gloo on the CUDA aliases
        assert mccl.engine(1, "auto") == "nccl"
        assert mccl.engine(torch.cuda.device_count() + 1, "auto") == "gloo"
        assert mccl.engine(1, "gloo") == "gloo"
    assert mccl.engine(2) == mccl.engine(2, CONFIG.mccl_engine)  # MCCL_ENGINE, read at import
    with pytest.raises(ValueError, match="mccl engine 'mpi': choose 'auto', 'gloo' or 'nccl'"):
        mccl.engine(1, "mpi")


@pytest.mark.slow
def test_a_work_only_cpp_holds_outlives_its_python_object(subpython):
    """The functional collectives' registry holds a Work in C++ only. After the Python
    side has dropped it, and hundreds of other works and garbage collections later,
    waiting on it still returns the result (a Python Work collected while C++ held
    it would leave that wait in the base Work::wait forever)."""
    r = subpython("""
        import gc, tempfile
        import torch, torch_musa
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol
        store = dist.FileStore(tempfile.mktemp(prefix="mccl_store_"), 1)
        dist.init_process_group("mccl", store=store, rank=0, world_size=1)
        x = torch.arange(6.0, device="musa")
        y = funcol.all_to_all_single(x, None, None, dist.group.WORLD)  # served by a Python kernel
        gc.collect()
        for _ in range(300):  # completed works nobody waits on
            dist.all_to_all_single(torch.empty(6, device="musa"), x, async_op=True)
        gc.collect()
        print("same:", torch.equal(funcol.wait_tensor(y).cpu(), x.cpu()))
        dist.destroy_process_group()
    """, timeout=60)
    assert r.returncode == 0 and "same: True" in r.stdout, r.stdout[-1000:] + r.stderr[-2000:]


def test_held_work_answers_cpp_and_python_alike():
    """The C++ Work that holds a Python one forwards every query to it, and a failed
    future raises through C++ as well, naming the collective."""
    class Failing(dist.Work):
        def __init__(self, fut):
            super().__init__()
            self.fut = fut

        def wait(self, timeout=None):
            raise mccl.MCCLError("mccl broadcast: peer went away")

        def get_future(self):
            return self.fut

        def is_completed(self):
            return True

        def is_success(self):
            return False

        def exception(self):
            return RuntimeError("mccl broadcast: peer went away")

        def result(self):
            return []

    fut = torch.futures.Future()
    errors = []
    works.fail(fut, errors, mccl.MCCLError("mccl broadcast: peer went away"))
    w = dist.Work.unbox(works.held(Failing(fut)))
    assert w.is_completed() and not w.is_success() and w.result() == []
    if torch.torch_version.TorchVersion(torch.__version__) >= (2, 13):
        assert "peer went away" in str(w.exception())
    else:  # torch 2.11 binds Work.exception() with no converter for its std::exception_ptr
        with pytest.raises(TypeError, match="exception_ptr"):
            w.exception()
    with pytest.raises(mccl.MCCLError, match="mccl broadcast"):
        w.wait()
    for f in (fut, w.get_future(), _C_work_future(w)):  # the Python future and C++'s view of it
        with pytest.raises(RuntimeError, match="mccl broadcast: peer went away"):
            f.wait()
    with pytest.raises(RuntimeError, match="expects an exception instance"):
        mccl_C._set_future_error(torch.futures.Future(), 3)


@pytest.mark.slow
def test_works_pending_at_exit_do_not_abort_the_process(subpython):
    """Async works still queued on Gloo's threads when the process exits: their
    completion runs in C++ there. A Python callback (as the kernels once chained)
    kept the group alive past destroy_process_group and took the GIL during
    interpreter shutdown, which aborted the process ("terminate called without an
    active exception") 5 times in 5 with these sizes. Works without a future
    (reduce_scatter) wait on the completer's threads, joined before finalization
    (3 aborts in 6 while they were left running as daemons)."""
    r = subpython("""
        import os, tempfile
        import torch, torch_musa
        import torch.distributed as dist
        store = dist.FileStore(tempfile.mktemp(prefix="mccl_store_"), 1)
        dist.init_process_group("mccl", store=store, rank=0, world_size=1)
        x = torch.ones(1 << 20, device="musa")
        out = torch.empty_like(x)
        for _ in range(100):  # Python kernels; nobody waits, most are still queued below
            dist.all_to_all_single(out, x, async_op=True)
            dist.reduce_scatter(out, [x], async_op=True)
        dist.destroy_process_group()  # the group goes (its threads drain and join) here
        names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
        print("gloo threads left:", sum(n.startswith("pt_gloo") for n in names))
    """, timeout=60)
    assert r.returncode == 0 and "gloo threads left: 0" in r.stdout, r.stdout[-1000:] + r.stderr[-2000:]


def test_chained_future_names_the_error_without_python():
    """A backend future's error reaches the Work's future named after the collective
    (through C++ as well) and its wait() as MCCLError; success yields the value."""
    t = torch.ones(6, device="musa")
    for each in (False, True):
        parent = torch.futures.Future()
        failed = torch.futures.Future()
        mccl_C._set_future_error(failed, RuntimeError("Timed out waiting 1000ms for recv"))
        out = works.chain(torch.futures.Future(), torch.futures.collect_all([failed]) if each else parent,
                          "all_to_all_single", None, [t], [t], each=each)
        if not each:
            mccl_C._set_future_error(parent, RuntimeError("Timed out waiting 1000ms for recv"))
        w = dist.Work.unbox(works.held(works.MusaWork(out, "all_to_all_single", named=True)))
        with pytest.raises(mccl.MCCLError, match=r"mccl all_to_all_single failed on this rank, local "
                           r"tensors \[\(6,\):float32\] \(a peer did not join .*\): Timed out"):
            w.wait()
        for f in (out, _C_work_future(w)):
            with pytest.raises(RuntimeError, match="mccl all_to_all_single failed.*Timed out"):
                f.wait()
    parent, ok = torch.futures.Future(), torch.futures.Future()
    works.chain(ok, parent, "all_to_all_single", None, [t], [[t], []])
    parent.set_result(None)
    got = ok.wait()
    assert len(got) == 2 and got[0][0] is t and got[1] == []


def _C_work_future(w):
    """The future as a C++ consumer sees it: through a C++ work wrapping it."""
    from torch._C import _distributed_c10d as c10d

    return c10d._create_work_from_future(w.get_future()).get_future()


def test_single_process_group():
    """world_size 1 over a HashStore-backed FileStore: in place, on the device, no copy."""
    store = dist.FileStore(tempfile.mktemp(prefix="mccl_store_"), 1)
    dist.init_process_group("mccl", store=store, rank=0, world_size=1)
    try:
        backend = dist.group.WORLD._get_backend(torch.device("musa"))
        assert backend.name() == mccl.engine(1)  # nccl under the cuda driver
        t = torch.arange(4.0, device="musa")
        ptr = t.data_ptr()
        dist.all_reduce(t)
        assert t.device.type == "musa" and t.data_ptr() == ptr
        assert torch.equal(t.cpu(), torch.arange(4.0))
        w = dist.broadcast(t, src=0, async_op=True)
        assert w.wait() and w.is_completed()
        assert w.get_future().value()[0].data_ptr() == ptr
        out = torch.empty(4, device="musa")
        dist.all_gather_into_tensor(out, t)
        assert torch.equal(out.cpu(), t.cpu())
        # async on a tensor big enough to still be in flight: the consumer waits on the work
        big = torch.full((1 << 22,), 2.0, device="musa")
        w = dist.all_reduce(big, async_op=True)
        w.wait()
        assert (big * 3).sum().item() == 6.0 * (1 << 22)
        fut = dist.all_reduce(big, op=dist._make_nccl_premul_sum(0.5), async_op=True).get_future()
        (res,) = fut.wait()
        assert res.device.type == "musa" and res.data_ptr() == big.data_ptr()
        assert torch.equal(res[:4].cpu(), torch.ones(4))
        rs = torch.empty(4, device="musa")
        dist.reduce_scatter_tensor(rs, torch.arange(4.0, device="musa"))
        assert torch.equal(rs.cpu(), torch.arange(4.0))
        gathered = [torch.empty(4, device="musa")]
        dist.all_gather(gathered, t)
        assert torch.equal(gathered[0].cpu(), t.cpu())
    finally:
        dist.destroy_process_group()


def test_hot_collectives_run_no_python_of_ours():
    """all_reduce, broadcast, all_gather_into_tensor and reduce_scatter_tensor go from the
    dispatcher to the C++ kernels: not one torch_musa Python frame per call (all_to_all_single,
    a Python kernel, shows the probe sees them)."""
    package = os.path.dirname(torch_musa.__file__)
    seen = []

    def probe(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            seen.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    store = dist.FileStore(tempfile.mktemp(prefix="mccl_store_"), 1)
    dist.init_process_group("mccl", store=store, rank=0, world_size=1)
    try:
        t, out = torch.ones(8, device="musa"), torch.empty(8, device="musa")
        sys.setprofile(probe)
        try:
            dist.all_reduce(t)
            dist.all_reduce(t, async_op=True).wait()
            dist.broadcast(t, 0)
            dist.all_gather_into_tensor(out, t)
            dist.reduce_scatter_tensor(t, out)
        finally:
            sys.setprofile(None)
        assert seen == []
        sys.setprofile(probe)
        try:
            dist.all_to_all_single(out, t)
        finally:
            sys.setprofile(None)
        assert any(s.startswith(kernels.__file__) for s in seen), seen
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------- 2 and 3 processes
@pytest.mark.slow
@pytest.mark.parametrize("name", COLLECTIVE_CHECKS)
def test_collectives_2(name):
    """2 processes: C++ kernels for the hot collectives, Python ones for the rest."""
    _check("collectives+init+ddp", 2, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", COLLECTIVE_CHECKS)
def test_collectives_3(name):
    """3 processes (an odd group: uneven splits, a non-power-of-two ring)."""
    _check("collectives", 3, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", COLLECTIVE_CHECKS)
def test_collectives_2_staged(name):
    """2 processes with every Gloo call staged through host copies, C++ and Python kernels."""
    _check("collectives", 2, name, env=STAGED)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["init_device_id", "init_cpu_gloo_musa_mccl", "init_env"])
def test_init_variants(name):
    _check("collectives+init+ddp", 2, name)


@pytest.mark.slow
def test_ddp_matches_single_process():
    """2 processes with half the batch each == 1 process with the full batch."""
    _check("collectives+init+ddp", 2, "ddp_parity")


@pytest.mark.slow
def test_sync_batch_norm():
    """nn.SyncBatchNorm over mccl on 2 ranks (unequal halves) == BatchNorm on the whole batch,
    forward, backward and running statistics (the musa kernels: torch_musa/ops/sync_batch_norm.py)."""
    _check("collectives+init+ddp", 2, "sync_batch_norm")


@pytest.mark.slow
def test_functional_collectives():
    _check("fsdp2", 2, "functional_collectives")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["functional_collectives", "fsdp2_parity"])
def test_fsdp2_staged(name):
    """Staged Gloo (as under the cuda driver): the functional collectives' work registry
    waits from C++ after the call completed, with the garbage collector run in between
    (a Python Work gone by then used to hang that wait forever)."""
    _check("fsdp2", 2, name, env=STAGED)


@pytest.mark.slow
def test_fsdp2_tiny_transformer():
    """fully_shard on a 2-layer transformer LM, 2 processes == 1 process, full batch."""
    _check("fsdp2", 2, "fsdp2_parity")


# --------------------------------------------------------------------------- faults
@pytest.mark.slow
@pytest.mark.parametrize("name", ["fault_broadcast", "fault_all_reduce"])
def test_peer_dies_or_stalls(name):
    """Rank 1 skips a broadcast, then exits: rank 0 raises within the timeout, naming the op."""
    results = _check("faults", 2, name, ranks=[0])
    assert "mccl " + name.split("_", 1)[1] in results[0][name + "_msg"]


@pytest.mark.slow
def test_peer_never_joins():
    results = _check("lonely", 2, "fault_never_joins", ranks=[0])
    assert "1/2" in results[0]["fault_never_joins_msg"]


P2P_PEER_CHECKS = ["p2p_send_outside", "p2p_recv_outside", "p2p_isend_outside", "p2p_irecv_negative",
                   "p2p_batch_outside", "p2p_recv_self", "p2p_isend_self", "p2p_group_still_works"]
P2P_SUBGROUP_CHECKS = ["p2p_subgroup_global_outside", "p2p_subgroup_group_dst", "p2p_subgroup_p2pop"]


@pytest.mark.slow
@pytest.mark.parametrize("name", P2P_PEER_CHECKS + P2P_SUBGROUP_CHECKS)
def test_p2p_invalid_peer(name):
    """send/recv/isend/irecv/P2POp naming a rank outside the group, or the own rank (Gloo
    has no connection to itself), raise a ValueError naming the peer and the allowed ranks
    at once, on every rank that asked, before Gloo sees the peer (it crashed the process
    with SIGSEGV/SIGBUS or waited the timeout); group-relative peers of a subgroup too."""
    _check("p2p_peers", 3, name, ranks=[0, 2] if name in P2P_SUBGROUP_CHECKS else None)


MISMATCH_CHECKS = ["mismatch_shape", "mismatch_dtype", "mismatch_reshape", "mismatch_collective",
                   "mismatch_broadcast", "mismatch_all_gather_into_tensor", "mismatch_reduce_scatter_tensor",
                   "mismatch_reduce", "mismatch_all_gather", "mismatch_async", "mismatch_then_ok",
                   "mismatch_verified_once"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MISMATCH_CHECKS)
def test_mismatch_across_ranks_by_default(name):
    """No setting needed: different shapes/dtypes/collectives across ranks raise on every rank,
    naming the collective and each rank's shapes/dtypes; the group keeps working."""
    _check("mismatch", 2, name)


STALLED_CHECKS = ["stalled_all_reduce", "stalled_async_broadcast", "stalled_python_kernel_new"]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("name", STALLED_CHECKS)
def test_mismatch_with_a_verified_call(name, world):
    """The default check sees a signature once: rank 0 calls one verified before (straight to
    the engine) while the others call a new one. Every rank raises within seconds rather than
    rank 0 waiting the group timeout, naming rank 0's call and the others' (not rank 0's next
    call), and the group stays usable."""
    _check("stalled", world, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", STALLED_CHECKS[:1])
def test_mismatch_with_a_verified_call_staged(name):
    _check("stalled", 2, name, env=STAGED)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mismatch_shape", "mismatch_dtype", "mismatch_then_ok"])
def test_mismatch_across_ranks_check_all(name):
    """MCCL_CHECK_COLLECTIVES=all: PyTorch's ProcessGroupWrapper checks every call."""
    _check("mismatch", 2, name, env=(("MCCL_CHECK_COLLECTIVES", "all"),))

"""Sharing musa tensors between processes (torch.multiprocessing, spawn,
queues), as CUDA IPC does: the receiver maps the sender's memory, writes are
seen both ways, and the memory outlives the sender's use of it."""
import pytest
import torch
import torch.multiprocessing as mp

from torch_musa.core import ipc

HOST = pytest.mark.requires_host_driver("musa memory is host RAM put in a memfd")
# The other tests hold under both drivers: under the cuda driver by CUDA IPC handles.

TIMEOUT = 60


def _child_adds_one(inbox, outbox):
    t = inbox.get()
    outbox.put((str(t.device), t.tolist()))
    t.add_(1)
    torch.musa.synchronize()
    outbox.put("written")
    assert inbox.get() == "parent wrote"
    outbox.put(t.tolist())  # the parent's write, seen here
    assert inbox.get() == "bye"


def _child_sends(outbox, inbox):
    t = torch.arange(6, dtype=torch.float64, device="musa").view(2, 3)[:, 1:]
    outbox.put(t)
    inbox.get()  # the parent has read it
    del t  # the sender's last reference goes: the receiver's copy must live on
    outbox.put("dropped")
    inbox.get()


@pytest.fixture
def spawn():
    ctx = mp.get_context("spawn")
    procs = []

    def start(target, *queues):
        p = ctx.Process(target=target, args=queues)
        p.start()
        procs.append(p)
        return p

    yield ctx, start
    for p in procs:
        p.join(TIMEOUT)
        if p.is_alive():
            p.kill()
        assert p.exitcode == 0, f"child exited with {p.exitcode}"


@pytest.mark.slow
def test_writes_visible_both_ways(spawn):
    ctx, start = spawn
    inbox, outbox = ctx.Queue(), ctx.Queue()
    start(_child_adds_one, inbox, outbox)
    t = torch.arange(4, dtype=torch.float32, device="musa")
    before = torch.musa.memory_allocated()
    inbox.put(t)
    assert outbox.get(timeout=TIMEOUT) == ("musa:0", [0.0, 1.0, 2.0, 3.0])
    assert outbox.get(timeout=TIMEOUT) == "written"
    assert t.tolist() == [1.0, 2.0, 3.0, 4.0], "the child's write is not seen"
    assert ipc.is_shared(t.untyped_storage())
    # the sender's pool block stays counted while the storage lives
    assert torch.musa.memory_allocated() == before
    t.mul_(10)
    torch.musa.synchronize()
    inbox.put("parent wrote")
    assert outbox.get(timeout=TIMEOUT) == [10.0, 20.0, 30.0, 40.0], "the parent's write is not seen"
    inbox.put("bye")


@pytest.mark.slow
def test_received_view_outlives_sender_reference(spawn):
    ctx, start = spawn
    outbox, inbox = ctx.Queue(), ctx.Queue()
    start(_child_sends, outbox, inbox)
    t = outbox.get(timeout=TIMEOUT)
    assert t.device.type == "musa" and t.dtype == torch.float64
    assert t.shape == (2, 2) and t.stride() == (3, 1)
    inbox.put("read")
    assert outbox.get(timeout=TIMEOUT) == "dropped"
    assert t.tolist() == [[1.0, 2.0], [4.0, 5.0]]
    assert torch.equal(t.cpu() * 2, (t * 2).cpu())
    inbox.put("bye")


@HOST
def test_sharing_twice_reuses_the_shared_memory():
    t = torch.ones(8, device="musa")
    s = t.untyped_storage()
    fd1, n1 = torch.ops.musa_ipc.share_fd(torch.empty(0, dtype=torch.uint8, device="musa").set_(s))
    ptr = s.data_ptr()
    fd2, n2 = torch.ops.musa_ipc.share_fd(torch.empty(0, dtype=torch.uint8, device="musa").set_(s))
    assert (fd1, n1) == (fd2, n2) and n1 == 32 and s.data_ptr() == ptr
    assert t.tolist() == [1.0] * 8, "moving into shared memory lost the bytes"


def test_empty_and_cpu_storages_still_pickle():  # holds under both drivers (H200 run)
    from multiprocessing.reduction import ForkingPickler
    import pickle
    e = torch.empty(0, device="musa")
    back = pickle.loads(ForkingPickler.dumps(e))
    assert back.device.type == "musa" and back.numel() == 0
    c = torch.arange(3.0)
    assert torch.equal(pickle.loads(ForkingPickler.dumps(c)), c)

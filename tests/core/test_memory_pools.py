"""Memory pools (torch.musa.MemPool, use_mem_pool, MemPoolContext), a user's allocator
(MUSAPluggableAllocator, change_current_allocator, get_allocator_backend) and raw
allocations (caching_allocator_alloc/delete), as torch.cuda documents them."""
import subprocess
import textwrap
import threading

import pytest
import torch

MiB = 1 << 20

pytestmark = pytest.mark.usefixtures("empty_musa_cache")
# Under the cuda driver torch.musa.MemPool is torch.cuda.MemPool: on the H200 a pool's own
# cache, the entering thread's routing, no-split pools and use_on_oom lending held as here.
HOST = pytest.mark.requires_host_driver(
    "the host allocator's pools; under the cuda driver torch.musa.MemPool is torch.cuda.MemPool")


def nbytes(n):
    return torch.empty(n, dtype=torch.uint8, device="musa")


@HOST
def test_allocations_inside_use_mem_pool_come_from_the_pool():
    pool = torch.musa.MemPool()
    assert pool.id[0] == 0 and pool.id[1] > 0 and pool.use_count() == 1
    outside = nbytes(MiB)
    with torch.musa.use_mem_pool(pool):
        assert pool.use_count() == 2
        assert torch.musa.MemPoolContext.active_pool() is pool
        inside = nbytes(MiB)
        big = nbytes(30 * MiB)
    assert pool.use_count() == 1 and torch.musa.MemPoolContext.active_pool() is None
    mine = pool.snapshot()
    addresses = {b["address"] for s in mine for b in s["blocks"] if b["state"] == "active_allocated"}
    assert addresses == {inside.data_ptr(), big.data_ptr()}
    assert all(s["segment_pool_id"] == pool.id for s in mine)
    everything = torch.musa.memory_snapshot()
    owner = {s["address"]: s["segment_pool_id"] for s in everything}
    assert any(pid == (0, 0) for pid in owner.values())  # `outside` is in the default pool
    assert sorted(s["total_size"] for s in mine) == [2 * MiB, 30 * MiB]
    assert torch.musa.memory_stats()["allocated_bytes.all.current"] >= 32 * MiB
    del outside, inside, big


def test_a_pool_caches_for_itself_only():
    pool = torch.musa.MemPool()
    with torch.musa.use_mem_pool(pool):
        x = nbytes(8 * MiB)
    ptr = x.data_ptr()
    del x  # cached in the pool
    y = nbytes(8 * MiB)  # outside: must not take the pool's block
    assert y.data_ptr() != ptr
    with torch.musa.use_mem_pool(pool):
        z = nbytes(8 * MiB)
    assert z.data_ptr() == ptr
    del y, z


@HOST
def test_deleting_a_pool_returns_its_memory():
    reserved = torch.musa.memory_reserved()
    pool = torch.musa.MemPool()
    with torch.musa.use_mem_pool(pool):
        x = nbytes(40 * MiB)
    assert torch.musa.memory_reserved() == reserved + 40 * MiB
    del pool  # x still lives: its segment stays until x goes
    assert torch.musa.memory_reserved() == reserved + 40 * MiB
    del x
    assert torch.musa.memory_reserved() == reserved


def test_only_the_entering_thread_allocates_to_the_pool():
    pool = torch.musa.MemPool()
    seen = {}
    with torch.musa.use_mem_pool(pool):
        t = threading.Thread(target=lambda: seen.setdefault("x", nbytes(MiB)))
        t.start()
        t.join()
        mine = nbytes(MiB)
    pooled = {b["address"] for s in pool.snapshot() for b in s["blocks"] if b["state"] == "active_allocated"}
    assert mine.data_ptr() in pooled and seen["x"].data_ptr() not in pooled


@HOST
def test_mem_pool_context_routes_while_alive():
    pool = torch.musa.MemPool()
    with torch.musa.MemPoolContext(pool):
        x = nbytes(4096)
    assert any(b["address"] == x.data_ptr() for s in pool.snapshot() for b in s["blocks"])


def test_no_split_pool_keeps_blocks_whole():
    pool = torch.musa.MemPool(no_split=True)
    with torch.musa.use_mem_pool(pool):
        a = nbytes(1000)
        b = nbytes(1000)
    segs = pool.snapshot()
    assert len(segs) == 2 and all(len(s["blocks"]) == 1 for s in segs)
    del a, b


@HOST
def test_graph_pool_ids_route_by_stream():
    from torch_musa import _C

    pid = tuple(_C._mempool_new_id(False))
    assert pid[0] > 0 and pid[1] == 0
    side = torch.musa.Stream()
    _C._musa_beginAllocateToPool(0, pid, side.stream_id)
    try:
        with torch.musa.stream(side):
            captured = nbytes(MiB)
        other = nbytes(MiB)
    finally:
        _C._musa_endAllocateToPool(0, pid)
        _C._musa_releasePool(0, pid)
    pooled = {b["address"] for s in torch.musa.memory_snapshot(pid) for b in s["blocks"]}
    assert captured.data_ptr() in pooled and other.data_ptr() not in pooled
    del captured, other
    assert torch.musa.memory_snapshot(pid) == []  # unused and empty: gone


@HOST
def test_caching_allocator_alloc_and_delete():
    base = torch.musa.memory_allocated()
    ptr = torch.musa.caching_allocator_alloc(1000)
    assert isinstance(ptr, int) and ptr
    assert torch.musa.memory_allocated() - base == 1024
    s = torch.musa.Stream()
    ptr2 = torch.musa.caching_allocator_alloc(3 * MiB, device=0, stream=s)
    seg = next(x for x in torch.musa.memory_snapshot() if x["address"] <= ptr2 < x["address"] + x["total_size"])
    assert seg["stream"] == s.stream_id
    torch.musa.caching_allocator_delete(ptr)
    torch.musa.caching_allocator_delete(ptr2)
    assert torch.musa.memory_allocated() == base
    with pytest.raises(RuntimeError, match="was not allocated by caching_allocator_alloc"):
        torch.musa.caching_allocator_delete(ptr)
    with pytest.raises(TypeError, match="stream"):
        torch.musa.caching_allocator_alloc(10, stream="s")


ALLOCATOR_C = r"""
#include <stdlib.h>
#include <sys/types.h>
long calls_alloc = 0, calls_free = 0, live = 0;
void* my_alloc(ssize_t size, int device, void* stream) {
  calls_alloc++; live += size; return malloc(size);
}
void my_free(void* ptr, ssize_t size, int device, void* stream) {
  calls_free++; live -= size; free(ptr);
}
"""


@pytest.fixture(scope="module")
def allocator_so(tmp_path_factory):
    d = tmp_path_factory.mktemp("alloc")
    (d / "alloc.c").write_text(ALLOCATOR_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(d / "alloc.so"), str(d / "alloc.c")], check=True)
    return str(d / "alloc.so")


@pytest.mark.slow
@HOST
def test_pluggable_allocator_serves_all_musa_memory(subpython, allocator_so):
    r = subpython(f"""
        import ctypes, torch, torch_musa
        lib = ctypes.CDLL({allocator_so!r})
        count = lambda name: ctypes.c_long.in_dll(lib, name).value
        print(torch.musa.memory.get_allocator_backend())
        a = torch.musa.memory.MUSAPluggableAllocator({allocator_so!r}, "my_alloc", "my_free")
        torch.musa.memory.change_current_allocator(a)
        print(torch.musa.memory.get_allocator_backend())
        x = torch.arange(1000, dtype=torch.float32, device="musa")
        y = (x * 2).sum().item()                      # the kernel's output comes from it too
        print(y, count("calls_alloc") >= 2, count("live") >= 4000,
              torch.musa.memory_allocated() == count("live"))
        del x
        print(count("calls_free") >= 1)
        try:
            torch.musa.memory.change_current_allocator(a)
        except RuntimeError as e:
            print("swap refused" if "Can't swap" in str(e) else e)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:5] == ["native", "pluggable", "999000.0 True True True", "True",
                                        "swap refused"]


@pytest.mark.slow
@HOST
def test_change_current_allocator_after_use_is_refused(subpython, allocator_so):
    r = subpython(f"""
        import torch, torch_musa
        torch.ones(1, device="musa")
        a = torch.musa.memory.MUSAPluggableAllocator({allocator_so!r}, "my_alloc", "my_free")
        torch.musa.memory.change_current_allocator(a)
    """)
    assert r.returncode != 0 and "Can't swap an already initialized allocator" in r.stderr


@HOST
def test_mem_pool_with_a_pluggable_allocator(allocator_so):
    import ctypes

    lib = ctypes.CDLL(allocator_so)
    before = ctypes.c_long.in_dll(lib, "calls_alloc").value
    alloc = torch.musa.memory.MUSAPluggableAllocator(allocator_so, "my_alloc", "my_free")
    pool = torch.musa.MemPool(alloc.allocator())
    with torch.musa.use_mem_pool(pool):
        x = torch.ones(1000, device="musa")
    assert ctypes.c_long.in_dll(lib, "calls_alloc").value == before + 1  # one 2 MiB segment
    assert ctypes.c_long.in_dll(lib, "live").value >= 2 * MiB
    assert x.sum().item() == 1000.0
    del x, pool
    assert ctypes.c_long.in_dll(lib, "live").value == 0  # the segment went back through my_free


def test_use_on_oom_pool_lends_its_free_blocks():
    total = torch.musa.get_device_properties(0).total_memory
    lender = torch.musa.MemPool(use_on_oom=True)
    with torch.musa.use_mem_pool(lender):
        x = nbytes(30 * MiB)
    ptr = x.data_ptr()
    del x  # 30 MiB free in the lender
    used = torch.musa.memory_reserved()
    torch.musa.set_per_process_memory_fraction((used + 10 * MiB) / total)
    try:
        y = nbytes(20 * MiB)  # does not fit beside it: borrows the lender's block
        assert y.data_ptr() == ptr
        with pytest.raises(torch.OutOfMemoryError):
            nbytes(20 * MiB)
    finally:
        torch.musa.set_per_process_memory_fraction(1.0)
    del y

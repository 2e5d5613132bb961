"""torch.musa.caching_allocator_enable / caching_allocator_disabled (torch.cuda's contract):
with caching off, freed musa memory goes back to the driver at once instead of staying
reserved; the mode at allocation decides, and private pools keep their memory."""
import pytest
import torch

import torch_musa  # noqa: F401

M = torch.musa
# Under the cuda driver CUDA's uncached allocations bypass its statistics altogether.
HOST_STATS = pytest.mark.requires_host_driver(
    "the host allocator counts uncached blocks in memory_allocated/memory_reserved")
MiB = 1 << 20


def _warm_cache():
    """A cached free 20 MiB segment: a 3 MiB request would be served from it if caching were on."""
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="musa")
    del x
    assert M.memory_reserved() - M.memory_allocated() >= 3 * MiB


@HOST_STATS
def test_freed_memory_goes_back_to_the_driver_while_disabled():
    _warm_cache()
    r0, a0 = M.memory_reserved(), M.memory_allocated()
    frees0 = M.memory_stats()["num_device_free"]
    with M.caching_allocator_disabled():
        y = torch.empty(3 * MiB, dtype=torch.uint8, device="musa")
        z = torch.empty(1000, device="musa")  # 4000 bytes, rounded to 4096
        # Fresh driver memory of exactly the rounded sizes, not the cached segment.
        assert M.memory_reserved() - r0 == 3 * MiB + 4096
        assert M.memory_allocated() - a0 == 3 * MiB + 4096
        y.fill_(7)
        del y
        assert M.memory_reserved() - r0 == 4096  # reserved falls with allocated
        assert M.memory_allocated() - a0 == 4096
        del z
        assert (M.memory_reserved(), M.memory_allocated()) == (r0, a0)
    assert M.memory_stats()["num_device_free"] == frees0 + 2
    # Caching is back: a freed block stays reserved.
    w = torch.empty(3 * MiB, dtype=torch.uint8, device="musa")
    del w
    assert M.memory_reserved() == r0


def test_blocks_allocated_with_caching_on_stay_cached():
    x = torch.empty(5 * MiB, dtype=torch.uint8, device="musa")
    r0 = M.memory_reserved()
    with M.caching_allocator_disabled():
        del x
        assert M.memory_reserved() == r0
        # and the block a disabled allocation leaves alone stays usable cache
    y = torch.empty(5 * MiB, dtype=torch.uint8, device="musa")
    assert M.memory_reserved() == r0
    del y


def test_memory_pool_keeps_its_blocks_while_disabled():
    pool = M.MemPool()
    with M.caching_allocator_disabled(), M.use_mem_pool(pool):
        x = torch.empty(2 * MiB, dtype=torch.uint8, device="musa")
        r = M.memory_reserved()
        del x
        assert M.memory_reserved() == r


@pytest.mark.requires_host_driver(
    "CUDA's uncached path calls cudaMalloc even in capture, which global capture refuses")
def test_graph_captured_with_caching_disabled_replays_correctly():
    # The capture's temporaries are freed during capture; the graph still refers to them,
    # so they must stay in the graph's pool rather than go back to the driver.
    x = torch.randn(256, 64, device="musa")
    w = torch.randn(64, 64, device="musa")
    torch.musa.synchronize()
    g = M.MUSAGraph()
    with M.caching_allocator_disabled():
        s = M.Stream()
        s.wait_stream(M.current_stream())
        with M.stream(s):
            ((x @ w).relu() * 2 + 1).sum(0)
        M.current_stream().wait_stream(s)
        with M.graph(g):
            out = ((x @ w).relu() * 2 + 1).sum(0)
        for _ in range(2):
            x.copy_(torch.randn(256, 64))
            g.replay()
            M.synchronize()
            ref = ((x.cpu() @ w.cpu()).relu() * 2 + 1).sum(0)
            torch.testing.assert_close(out.cpu(), ref)


def test_enable_toggles_and_context_restores_previous_state():
    is_on = M.memory._caching_allocator_is_enabled
    assert is_on() is True
    M.caching_allocator_enable(False)
    try:
        assert is_on() is False
        with M.caching_allocator_disabled():
            assert is_on() is False
        assert is_on() is False  # the context restores what was, not True
    finally:
        M.caching_allocator_enable()
    assert is_on() is True
    with pytest.raises(ValueError):
        with M.caching_allocator_disabled():
            assert is_on() is False
            raise ValueError("inside")
    assert is_on() is True


def test_enable_rejects_non_bool():
    with pytest.raises(TypeError, match="takes a bool, got int"):
        M.caching_allocator_enable(0)
    assert M.memory._caching_allocator_is_enabled() is True

"""The caching allocator: statistics, reuse, limits, out-of-memory, pinned memory."""
import gc

import pytest
import torch

MiB = 1 << 20


@pytest.fixture(autouse=True)
def clean():
    gc.collect()
    torch.musa.empty_cache()
    yield
    torch.musa.set_per_process_memory_fraction(1.0, 0)
    gc.collect()
    torch.musa.empty_cache()


def test_allocated_and_reserved_follow_tensors():
    base = torch.musa.memory_allocated()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="musa")
    assert torch.musa.memory_allocated() - base == 4 * MiB
    assert torch.musa.memory_reserved() >= torch.musa.memory_allocated()
    assert torch.accelerator.memory_allocated() == torch.musa.memory_allocated()
    stats = torch.musa.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.musa.memory_allocated()
    assert stats["allocation.large_pool.current"] >= 1
    del x
    assert torch.musa.memory_allocated() == base
    assert torch.musa.memory_reserved() >= 4 * MiB  # cached, not returned


@pytest.mark.requires_devices(2)
def test_host_kernel_outputs_are_counted_on_their_device():
    a = torch.ones(MiB, device="musa:1")
    before0, before1 = torch.musa.memory_allocated(0), torch.musa.memory_allocated(1)
    b = a * 2  # computed by the fallback, output adopted from the musa pool
    assert torch.musa.memory_allocated(1) - before1 == 4 * MiB
    assert torch.musa.memory_allocated(0) == before0
    del a, b


def test_a_retagged_result_is_musa_memory_through_and_through():
    a = torch.ones(256, 256, device="musa")
    base = torch.musa.memory_allocated()
    b = a + 1  # the host kernel's fresh result becomes the musa tensor in place
    storage = b.untyped_storage()
    assert b.device == storage.device == torch.device("musa:0")
    assert torch.musa.memory_allocated() - base == b.numel() * 4
    b.resize_(512, 512)  # grows through the musa allocator, keeping the values
    assert b.untyped_storage().device.type == "musa"
    assert torch.musa.memory_allocated() - base == 512 * 512 * 4
    assert torch.equal(b.view(-1)[: 256 * 256].cpu(), torch.full((256 * 256,), 2.0))
    del b, storage
    assert torch.musa.memory_allocated() == base


def test_in_place_ops_leave_python_held_tensors_intact():
    import sys

    a = torch.zeros(8, device="musa")
    refs = sys.getrefcount(a)
    for _ in range(100):
        a.add_(1)  # the unboxed wrapper borrows `a` rather than copying it
    assert sys.getrefcount(a) == refs
    assert a.cpu().tolist() == [100.0] * 8


def test_freed_blocks_are_reused_and_empty_cache_returns_them():
    """12 MiB: a segment of its own (requests from 10 MiB are not packed into the 20 MiB
    segments that smaller ones share, where live tensors of other tests may sit)."""
    torch.musa.empty_cache()
    x = torch.empty(12 * MiB, dtype=torch.uint8, device="musa")
    ptr = x.data_ptr()
    del x
    segments = torch.musa.memory_stats()["segment.all.current"]
    y = torch.empty(12 * MiB, dtype=torch.uint8, device="musa")
    assert y.data_ptr() == ptr
    assert torch.musa.memory_stats()["segment.all.current"] == segments
    reserved = torch.musa.memory_reserved()
    del y
    torch.musa.empty_cache()
    assert torch.musa.memory_reserved() == reserved - 12 * MiB
    assert all(seg["address"] != ptr for seg in torch.musa.memory_snapshot())


def test_peak_and_reset():
    torch.musa.reset_peak_memory_stats()
    base = torch.musa.memory_allocated()
    x = torch.empty(16 * MiB, dtype=torch.uint8, device="musa")
    del x
    assert torch.musa.max_memory_allocated() >= base + 16 * MiB
    torch.musa.reset_peak_memory_stats()
    assert torch.musa.max_memory_allocated() == torch.musa.memory_allocated()
    torch.musa.reset_accumulated_memory_stats()
    assert torch.musa.memory_stats()["allocation.all.allocated"] == 0


@pytest.mark.requires_host_driver(
    "checks the host allocator's message (profile, capacity); the cuda driver's names musa and the "
    "CUDA allocator's figures")
@pytest.mark.requires_devices(2)
def test_out_of_memory_names_sizes_and_device_recovers():
    torch.musa.set_per_process_memory_fraction(64 * MiB / torch.musa.get_device_properties(0).total_memory, 0)
    keep = torch.empty(40 * MiB, dtype=torch.uint8, device="musa:0")
    with pytest.raises(torch.musa.OutOfMemoryError) as info:
        torch.empty(40 * MiB, dtype=torch.uint8, device="musa:0")
    msg = str(info.value)
    assert "Tried to allocate 40.00 MiB" in msg and "musa:0" in msg
    assert "total capacity of 48.00 GiB" in msg and "allocated by PyTorch" in msg
    assert "set_per_process_memory_fraction" in msg
    assert issubclass(torch.musa.OutOfMemoryError, torch.OutOfMemoryError)
    assert torch.musa.memory_stats()["num_ooms"] >= 1
    del keep
    again = torch.empty(40 * MiB, dtype=torch.uint8, device="musa:0")  # usable after freeing
    assert again.numel() == 40 * MiB
    assert torch.empty(40 * MiB, dtype=torch.uint8, device="musa:1").numel() == 40 * MiB  # other device unaffected


@pytest.mark.slow
def test_oom_inside_a_kernel_is_the_same_error(subpython):
    # A fresh process: the cap is 16 MiB above what it holds, whatever earlier tests left.
    r = subpython(f"""
        import torch, torch_musa
        allowed = torch.musa.memory_reserved(0) + 16 * {MiB}
        torch.musa.set_per_process_memory_fraction(allowed / torch.musa.get_device_properties(0).total_memory, 0)
        x = torch.ones(3 * {MiB}, device="musa:0")  # 12 MiB
        try:
            x * 2
        except torch.OutOfMemoryError as e:
            print("OOM", type(e).__name__)
        print(x.sum().item(), (x[:4] + 1).sum().item())  # still usable
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "OOM OutOfMemoryError" in r.stdout and f"{float(3 * MiB)} 8.0" in r.stdout


@pytest.mark.slow
@pytest.mark.requires_host_driver("device memory is not host memory on a GPU")
def test_capacity_beyond_host_memory_is_refused_before_the_host_runs_out(subpython):
    r = subpython("""
        import torch, torch_musa
        try:
            torch.empty(6 << 30, dtype=torch.uint8, device="musa")
        except torch.OutOfMemoryError as e:
            print("OOM", e)
        print(torch.ones(2, device="musa").sum().item())
    """, {"TORCH_MUSA_HOST_MEMORY_LIMIT": "4GB"})
    assert r.returncode == 0, r.stderr
    assert "OOM" in r.stdout and "TORCH_MUSA_HOST_MEMORY_LIMIT" in r.stdout and "2.0" in r.stdout


def test_no_growth_over_ten_thousand_cycles():
    def cycle():
        a = torch.empty(1000, device="musa")
        b = a.fill_(1) + 1
        return b

    for _ in range(100):
        cycle()
    allocated, reserved = torch.musa.memory_allocated(), torch.musa.memory_reserved()
    for _ in range(10_000):
        cycle()
    assert torch.musa.memory_allocated() == allocated
    assert torch.musa.memory_reserved() == reserved


@pytest.mark.requires_host_driver(
    "the snapshot lists the host allocator's segments; the CUDA caching allocator keeps its own")
def test_snapshot_mem_get_info_and_summary():
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="musa")
    snap = torch.musa.memory_snapshot()
    mine = [s for s in snap if s["address"] == x.data_ptr()]
    assert mine and mine[0]["device"] == 0 and mine[0]["blocks"][0]["state"] == "active_allocated"
    free, total = torch.musa.mem_get_info()
    assert total == 48 << 30 and free <= total - 2 * MiB
    text = torch.musa.memory_summary()
    assert "Allocated memory" in text and "device ID 0" in text
    assert "Non-releasable memory" in text and "Oversize allocations" in text


@pytest.mark.slow
@pytest.mark.requires_host_driver(
    "checks the host allocator's options; under the cuda driver PYTORCH_MUSA_ALLOC_CONF goes to the "
    "CUDA allocator, whose options (expandable_segments among them) are valid there")
def test_alloc_conf_is_read_and_checked(subpython):
    r = subpython("""
        import torch, torch_musa
        print(torch.musa.memory_stats()["max_split_size"])
        x = torch.empty(64 << 20, dtype=torch.uint8, device="musa"); del x
        print(torch.musa.memory_reserved())  # oversize blocks stay cached whole, as on CUDA
    """, {"PYTORCH_MUSA_ALLOC_CONF": "max_split_size_mb:32,garbage_collection_threshold:0.6"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(32 << 20), str(64 << 20)]
    bad = subpython("import torch_musa", {"PYTORCH_MUSA_ALLOC_CONF": "pinned_use_host_register:True"})
    assert bad.returncode != 0 and "unknown or malformed option 'pinned_use_host_register:True'" in bad.stderr
    assert "max_split_size_mb" in bad.stderr


def test_pinned_memory_and_dataloader():
    x = torch.randn(16)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x)
    data = torch.utils.data.TensorDataset(torch.arange(8.0))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    batches = list(loader)
    assert all(b[0].is_pinned() for b in batches)
    assert torch.equal(batches[1][0].to("musa", non_blocking=True).cpu(), torch.arange(4.0, 8.0))


def test_inactive_split_counts_net_changes_as_cuda_does(empty_musa_cache):
    """A split or a merge changes inactive_split by its net amount, once (CUDA's
    allocator): allocating from an already split piece shrinks it without a block
    leaving and re-entering the count, and freeing into a free neighbour moves bytes
    only, so the accumulated allocated/freed figures match CUDA's. A private pool
    gives the tensors a fresh segment of their own; the figures are changes."""
    keys = [f"inactive_split{k}.all.{f}" for k in ("", "_bytes")
            for f in ("current", "allocated", "freed")]
    base = torch.musa.memory_stats()

    def change():
        m = torch.musa.memory_stats()
        return [m[k] - base[k] for k in keys]  # count: current, allocated, freed; then bytes

    seg = 2 << 20  # a small-pool segment; 128 floats take its smallest block, 512 bytes
    pool = torch.musa.MemPool()
    with torch.musa.use_mem_pool(pool):
        a = torch.empty(128, device="musa")
        assert change() == [1, 1, 0, seg - 512, seg - 512, 0]
        b = torch.empty(128, device="musa")  # from the split remainder: it shrinks
        assert change() == [1, 1, 0, seg - 1024, seg - 512, 512]
        del b  # back into the remainder: 512 bytes return, no block comes or goes
        assert change() == [1, 1, 0, seg - 512, seg, 512]
        del a  # the whole segment again: no split piece left
        assert change() == [0, 1, 1, 0, seg, seg]

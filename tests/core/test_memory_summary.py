"""torch.musa.memory_summary prints torch.cuda.memory_summary's layout: given the same
statistics, torch.cuda's own function prints the same text, with CUDA for MUSA."""
import pytest
import torch
import torch.cuda.memory

from torch_musa.core import memory as musa_memory


def cuda_summary(monkeypatch, stats, device, abbreviated):
    """torch.cuda.memory_summary over ``stats`` (it asks no CUDA device for anything else)."""
    monkeypatch.setattr(torch.cuda.memory, "memory_stats", lambda device=None: stats)
    monkeypatch.setattr(torch.cuda.memory, "_get_device_index", lambda d, optional=False: d)
    text = torch.cuda.memory.memory_summary(device, abbreviated)
    return text.replace("CUDA", "MUSA").replace("cudaMalloc", "musaMalloc")


@pytest.mark.parametrize("abbreviated", [False, True])
def test_summary_of_live_allocations_is_cudas_layout(monkeypatch, abbreviated):
    held = [torch.empty(n, device="musa") for n in (10, 300_000, 5_000_000)]
    stats = torch.musa.memory_stats(0)
    ours = torch.musa.memory_summary(0, abbreviated=abbreviated)
    assert ours == cuda_summary(monkeypatch, stats, 0, abbreviated)
    assert "PyTorch MUSA memory summary, device ID 0" in ours
    assert len(ours.splitlines()) == (29 if abbreviated else 47)
    assert all(len(line) == 77 for line in ours.splitlines())
    del held


def test_large_figures_take_cudas_units(monkeypatch):
    """Sizes in MiB/GiB and counts in K/M, each pool row in its total's unit."""
    stats = dict(torch.musa.memory_stats(0))
    stats.update({
        "allocated_bytes.all.current": 5 << 30, "allocated_bytes.large_pool.current": (5 << 30) - (3 << 20),
        "allocated_bytes.small_pool.current": 3 << 20, "reserved_bytes.all.peak": 3 << 40,
        "requested_bytes.all.freed": 900 << 20, "allocation.all.allocated": 2_000_000,
        "allocation.small_pool.allocated": 1_999_000, "allocation.large_pool.allocated": 1000,
        "active.all.current": 760_000, "oversize_allocations.freed": 12_345_678_901,
    })
    stats["num_ooms"], stats["num_alloc_retries"] = 3, 12
    monkeypatch.setattr(musa_memory, "memory_stats", lambda device=None: stats)
    ours = torch.musa.memory_summary(0)
    assert "5120 MiB" in ours and "3072 GiB" in ours and " K " in ours and " M " in ours
    assert "MUSA OOMs: 3" in ours and "musaMalloc retries: 12" in ours
    assert ours == cuda_summary(monkeypatch, stats, 0, False)

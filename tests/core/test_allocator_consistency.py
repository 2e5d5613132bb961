"""Random malloc/free sequences keep the caching allocator's books straight: every
segment's blocks tile it, no two free blocks sit side by side (frees merge), and
the split/allocated statistics agree with the snapshot. Guards the allocator's
fast paths (a split remainder or merged block re-pointing a free-list node in
place, recycled blocks and nodes)."""

import random

import pytest
import torch

# Under the cuda driver CUDA's caching allocator keeps these books (held on the H200).
pytestmark = pytest.mark.usefixtures("empty_musa_cache")


def check_books():
    stats = torch.musa.memory_stats()
    inactive = inactive_bytes = allocated = 0
    for seg in torch.musa.memory_snapshot():
        if seg["device"] != torch.musa.current_device():
            continue  # the statistics are the current device's; the snapshot has every device's
        blocks = seg["blocks"]
        assert sum(b["size"] for b in blocks) == seg["total_size"], seg
        for left, right in zip(blocks, blocks[1:]):
            assert not (left["state"] == "inactive" and right["state"] == "inactive"), seg
        if len(blocks) > 1:
            free = [b["size"] for b in blocks if b["state"] == "inactive"]
            inactive += len(free)
            inactive_bytes += sum(free)
        allocated += sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    assert stats.get("inactive_split.all.current", 0) == inactive
    assert stats.get("inactive_split_bytes.all.current", 0) == inactive_bytes
    assert stats["allocated_bytes.all.current"] == allocated


@pytest.mark.parametrize("seed", [0, 1])
def test_random_alloc_free_keeps_books(seed):
    rng = random.Random(seed)
    # Tensors that earlier tests in this process keep (a module's cache) stay; under
    # pytest-xdist which tests ran before this one differs from run to run.
    held, held_reserved = torch.musa.memory_allocated(), torch.musa.memory_reserved()
    live = []
    for step in range(1500):
        if live and rng.random() < 0.48:
            live.pop(rng.randrange(len(live)))
        else:
            n = rng.choice([1, 64, 200, 1000, 5000, 70_000, 300_000, 2_000_000])
            live.append(torch.empty(n, device="musa"))
        if step % 50 == 0:
            check_books()
    check_books()
    live.clear()
    check_books()
    assert torch.musa.memory_allocated() == held
    torch.musa.empty_cache()
    assert torch.musa.memory_reserved() == held_reserved

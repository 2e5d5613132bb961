"""Pinned host memory as the real torch_musa's tests expect it: the caching host
allocator reuses a freed block, but not while a non_blocking copy may still use it;
memory registered with musaHostRegister is pinned; out-of-memory observers are told."""
import pytest
import torch

import torch_musa  # noqa: F401


def _cycles(seconds):
    return int(seconds * torch.musa.get_device_properties(0).clock_rate * 1000)


def test_a_freed_pinned_block_is_reused():
    t = torch.tensor([1]).pin_memory()
    ptr = t.data_ptr()
    del t
    again = torch.tensor([2]).pin_memory()
    assert again.data_ptr() == ptr
    assert again.is_pinned() and again.item() == 2


def test_a_block_a_pending_copy_uses_is_not_reused():
    torch.musa.synchronize()
    pinned = torch.tensor([1]).pin_memory()
    ptr = pinned.data_ptr()
    dst = torch.zeros(1, device="musa")
    torch.musa._sleep(_cycles(0.3))  # the stream is busy: the copy's event is still ahead
    dst.copy_(pinned, non_blocking=True)
    del pinned
    other = torch.tensor([7]).pin_memory()
    assert other.data_ptr() != ptr
    torch.musa.synchronize()
    del other
    blocks = [torch.tensor([3]).pin_memory() for _ in range(2)]
    assert ptr in {b.data_ptr() for b in blocks}  # once the copy is done, it is reused
    assert dst.item() == 1


@pytest.mark.requires_host_driver("the cuda driver's pinned memory is CUDA's: musaHostRegister "
                                   "keeps its ranges in the host driver's registry only")
def test_musa_host_register_pins_the_range():
    t = torch.ones(20)
    rt = torch.musa.musart()
    assert not t.is_pinned()
    assert rt.musaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0) == 0
    try:
        assert t.is_pinned() and t[5:].is_pinned()
        assert not torch.ones(20).is_pinned()
    finally:
        assert rt.musaHostUnregister(t.data_ptr()) == 0
    assert not t.is_pinned()


def test_out_of_memory_observers_are_told_and_the_device_stays_usable():
    seen = []
    torch.musa._MUSAC._musa_attach_out_of_memory_observer(
        lambda device, alloc, allocated, free: seen.append((device, alloc, allocated, free)))
    huge = 1 << 50
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        torch.empty(huge, dtype=torch.uint8, device="musa")
    assert len(seen) == 1
    device, alloc, allocated, free = seen[0]
    assert device == 0 and alloc >= huge
    assert allocated == torch.musa.memory_allocated(0)
    assert 0 <= free <= torch.musa.mem_get_info(0)[1]
    assert (torch.ones(3, device="musa") + 1).sum().item() == 6

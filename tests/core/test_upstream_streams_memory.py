"""Streams, events and memory answer as the real torch_musa's (and torch.cuda's) do,
where user code and the real package's own tests look (issue 36, item 5)."""
import pytest
import torch


@pytest.mark.parametrize("bad", [-0.1, 2.0, 1.0000001])
def test_a_memory_fraction_outside_0_1_is_a_value_error_naming_it(bad):
    # torch.cuda and the real torch_musa check the range in Python: ValueError
    # "Invalid fraction value: -0.1. Allowed range: 0~1", before touching the allocator.
    before = torch.musa.get_per_process_memory_fraction(0)
    with pytest.raises(ValueError, match=rf"Invalid fraction value: {bad}\. Allowed range: 0~1"):
        torch.musa.set_per_process_memory_fraction(bad)
    assert torch.musa.get_per_process_memory_fraction(0) == before


def test_a_memory_fraction_of_another_type_is_still_a_type_error():
    with pytest.raises(TypeError, match="Invalid type"):
        torch.musa.set_per_process_memory_fraction(1)


@pytest.mark.requires_devices(2)
def test_peer_access_with_a_bad_index_is_torch_cudas_assertion_error():
    # torch.cuda.can_device_access_peer (and the real torch_musa's) raise
    # AssertionError("Invalid device id") / AssertionError("Invalid peer device id");
    # this project's range detail stays, and the error is still an IndexError.
    n = torch.musa.device_count()
    with pytest.raises(AssertionError, match=f"^Invalid peer device id musa:{n}: this process sees {n}"):
        torch.musa.can_device_access_peer(0, n)
    with pytest.raises(AssertionError, match="^Invalid device id musa:-1"):
        torch.musa.can_device_access_peer(-1, 1)
    with pytest.raises(IndexError, match="^Invalid device id musa:100"):
        torch.musa.can_device_access_peer(100, 0)
    assert torch.musa.can_device_access_peer(0, 0) is False

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

"""A misspelt device type given to torch.musa's own device arguments: the error keeps
PyTorch's message (which lists the backend as 'privateuseone') and names musa's spellings,
with the likely one."""
import pytest
import torch

ENTRY_POINTS = {
    "set_device": lambda d: torch.musa.set_device(d),
    "device": lambda d: torch.musa.device(d),
    "memory_allocated": lambda d: torch.musa.memory_allocated(d),
    "get_device_properties": lambda d: torch.musa.get_device_properties(d),
    "synchronize": lambda d: torch.musa.synchronize(d),
    "Stream": lambda d: torch.musa.Stream(device=d),
    "set_rng_state": lambda d: torch.musa.set_rng_state(torch.musa.get_rng_state(), d),
}


@pytest.mark.parametrize("call", ENTRY_POINTS.values(), ids=ENTRY_POINTS.keys())
def test_a_near_miss_suggests_musa(call):
    with pytest.raises(RuntimeError, match=r"device string: mus \(did you mean 'musa:0'\? "
                                           r"torch\.musa takes 'musa' or 'musa:N'"):
        call("mus:0")


def test_a_far_miss_still_names_musas_spellings():
    with pytest.raises(RuntimeError, match=r"device string: gpu \(torch\.musa takes 'musa' or 'musa:N'; "
                                           r"PyTorch lists the musa backend as 'privateuseone'\)"):
        torch.musa.set_device("gpu")


def test_other_device_errors_are_pytorchs_own():
    with pytest.raises(RuntimeError, match=r"^Invalid device string: 'musa:x'$"):
        torch.musa.synchronize("musa:x")
    with pytest.raises(ValueError, match="Expected a musa device, but got: cpu"):
        torch.musa.set_device("cpu")
    assert torch.musa.device("musa:0").idx == 0

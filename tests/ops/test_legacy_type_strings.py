"""Legacy type names in Tensor.type and torch.set_default_tensor_type: the real
torch_musa reads "torch_musa.X" as "torch.musa.X" (its patch to torch's type-string
parser), and names musa tensors "torch.musa.X"."""
import warnings

import pytest
import torch

import torch_musa

NAMES = ["ByteTensor", "CharTensor", "ShortTensor", "IntTensor", "LongTensor", "HalfTensor",
         "BFloat16Tensor", "FloatTensor", "DoubleTensor", "BoolTensor"]


@pytest.mark.parametrize("name", NAMES)
def test_every_spelling_of_a_legacy_type_gives_the_same_musa_tensor(name):
    cpu = torch.arange(64).type(f"torch.{name}")
    for spelling in (f"torch.musa.{name}", f"torch_musa.{name}", getattr(torch.musa, name),
                     getattr(torch_musa, name)):
        x = torch.arange(64).type(spelling)
        assert x.device.type == "musa" and x.dtype == cpu.dtype, spelling
        assert x.type() == f"torch.musa.{name}"
        assert torch.equal(x.cpu(), cpu)
    assert torch.arange(4).type(dtype=f"torch_musa.{name}").device.type == "musa"


def test_other_uses_of_type_are_unchanged():
    x = torch.arange(3)
    assert x.type() == "torch.LongTensor"
    assert x.type(torch.float16).dtype == torch.float16
    assert x.to("musa").type("torch.FloatTensor").device.type == "cpu"
    with pytest.raises(ValueError, match="invalid type"):
        x.type("torch_musa.NoSuchTensor")


def test_set_default_tensor_type_takes_the_torch_musa_spelling():
    try:
        with warnings.catch_warnings():  # torch's deprecation warning comes once a process
            warnings.simplefilter("ignore", UserWarning)
            torch.set_default_tensor_type("torch_musa.FloatTensor")
        assert torch.empty(2).device.type == "musa"
    finally:
        torch.set_default_tensor_type(torch.FloatTensor)
    assert torch.empty(2).device.type == "cpu"

"""``copy_`` between tensors of one musa device: musa's own kernel, the CPU's answers.

Casts inside a training step are copies within one device (hundreds per step under
autocast); musa serves them with its own ``copy_`` kernel instead of PyTorch's
generic one, which reached the same copy through ``_copy_from``. Every case here
compares with the same copy on the CPU device, bit for bit.
"""
from __future__ import annotations

import warnings

import pytest
import torch

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool,
          torch.complex64)


def _both(fn):
    """fn(device) on the CPU and on musa; the musa result brought back."""
    return fn("cpu"), fn("musa").cpu()


def test_musa_serves_copy_itself():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::copy_", "PrivateUse1")


@pytest.mark.parametrize("dst_dtype", DTYPES, ids=str)
@pytest.mark.parametrize("src_dtype", DTYPES, ids=str)
def test_casts_match_the_cpu(src_dtype, dst_dtype):
    def run(device):
        g = torch.Generator().manual_seed(0)
        src = (torch.randn(5, 7, generator=g, dtype=torch.float32) * 10).to(src_dtype).to(device)
        dst = torch.zeros(5, 7, dtype=dst_dtype, device=device)
        with warnings.catch_warnings():  # complex to real: "discards the imaginary part", once
            warnings.simplefilter("ignore")
            dst.copy_(src)
        return dst
    cpu, musa = _both(run)
    assert torch.equal(cpu, musa)


@pytest.mark.parametrize("case", ["broadcast", "transposed", "strided_dst", "conj", "neg",
                                  "same_data", "disjoint_halves", "zero_tensor_src"])
@pytest.mark.filterwarnings("ignore:aten::.*not in the musa operator registry")
def test_layouts_and_sharing_match_the_cpu(case):
    def run(device):
        x = torch.arange(24., device=device).reshape(4, 6)
        if case == "broadcast":
            x.copy_(torch.arange(6., device=device))
        elif case == "transposed":
            y = torch.empty(6, 4, device=device)
            y.copy_(x.t())
            return y
        elif case == "strided_dst":
            x[:, ::2].copy_(-x[:, 1::2])
        elif case == "conj":
            z = torch.complex(x, x + 1)
            out = torch.empty_like(z)
            out.copy_(z.conj())
            return torch.view_as_real(out)
        elif case == "neg":
            z = torch.complex(x, x + 1).conj().imag  # a negative-bit view
            out = torch.empty_like(z)
            out.copy_(z)
            return out
        elif case == "same_data":
            x.copy_(x.view(4, 6))
        elif case == "disjoint_halves":
            x[:2].copy_(x[2:])
        elif case == "zero_tensor_src":
            x.copy_(torch._efficientzerotensor(4, 6, device=device))
        return x
    cpu, musa = _both(run)
    assert torch.equal(cpu, musa)


def test_partial_overlap_is_refused_as_on_the_cpu():
    for device in ("cpu", "musa"):
        x = torch.arange(6., device=device)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            x[1:].copy_(x[:-1])
        assert x.tolist() == [0., 1., 2., 3., 4., 5.]  # nothing written


def test_zero_tensor_destination_is_refused():
    z = torch._efficientzerotensor(3, device="musa")
    with pytest.raises(RuntimeError, match="ZeroTensors are immutable"):
        z.copy_(torch.ones(3, device="musa"))


def test_copies_to_and_from_the_host_still_work():
    x = torch.arange(6., device="musa")
    h = torch.empty(6)
    h.copy_(x)
    back = torch.zeros(6, device="musa")
    back.copy_(h)
    assert torch.equal(h, torch.arange(6.)) and torch.equal(back.cpu(), h)


def test_autograd_through_a_cast_matches_the_cpu():
    def run(device):
        w = torch.linspace(-1, 1, 12, device=device).requires_grad_()
        y = w.to(torch.bfloat16).float().pow(2).sum()
        y.backward()
        return w.grad
    cpu, musa = _both(run)
    assert torch.equal(cpu, musa)


def test_version_counter_and_identity_are_kept():
    x = torch.zeros(4, device="musa")
    v = x._version
    out = x.copy_(torch.ones(4, device="musa"))
    assert out is x and x._version == v + 1

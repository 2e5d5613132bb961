"""Nested tensors on musa, against the CPU: strided ones run the CPU's
NestedTensor kernels over aliases of musa memory (csrc/aten/nested_fallback.cpp);
jagged ones are Python subclasses over dense musa tensors."""
import warnings

import pytest
import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")

ROWS = [(2, 3), (4, 3), (1, 3)]


def _pair(layout=torch.strided, requires_grad=False):
    torch.manual_seed(0)
    parts = [torch.randn(*s) for s in ROWS]
    cpu = torch.nested.nested_tensor(parts, layout=layout, requires_grad=requires_grad)
    musa = torch.nested.nested_tensor(parts, layout=layout, device="musa",
                                      requires_grad=requires_grad)
    return cpu, musa


def _same(musa, cpu, atol=1e-6):
    assert musa.device.type == "musa"
    if cpu.is_nested:
        assert musa.is_nested
        a, b = musa.unbind(), cpu.unbind()
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert x.device.type == "musa"
            torch.testing.assert_close(x.cpu(), y, atol=atol, rtol=1e-5)
    else:
        torch.testing.assert_close(musa.cpu(), cpu, atol=atol, rtol=1e-5)


W = torch.randn(5, 3)
OPS = {
    "mul_scalar": lambda t: t * 2,
    "add": lambda t: t + t,
    "mul": lambda t: t * t,
    "sub_alpha": lambda t: torch.sub(t, t * 3, alpha=0.5),
    "relu": lambda t: t.relu(),
    "gelu": lambda t: F.gelu(t),
    "tanh": lambda t: t.tanh(),
    "neg": lambda t: -t,
    "softmax": lambda t: t.softmax(-1),
    "sum_last": lambda t: t.sum(-1, keepdim=True),
    "layer_norm": lambda t: F.layer_norm(t, (3,), torch.full((3,), 2.0, device=t.device),
                                         torch.ones(3, device=t.device)),
    "linear": lambda t: F.linear(t, W.to(t.device), torch.ones(5, device=t.device)),
    "bmm": lambda t: torch.bmm(t, t.transpose(1, 2)),
    "matmul_nested": lambda t: torch.matmul(t, t.transpose(1, 2)),
    "transpose_contig": lambda t: t.transpose(1, 2).contiguous(),
    "clone": lambda t: t.clone(),
    "to_padded": lambda t: torch.nested.to_padded_tensor(t, -1.0),
    "to_padded_shape": lambda t: torch.nested.to_padded_tensor(t, 0.0, (3, 5, 4)),
    "unbind_1": lambda t: t.unbind()[1],
    "select_0": lambda t: t[2],
    "masked_fill": lambda t: t.masked_fill(t > 0, 0.5),
    "dropout_eval": lambda t: F.dropout(t, 0.5, training=False),
    "to_float64": lambda t: t.to(torch.float64),
}


# PyTorch registers sum.dim_IntList for NestedTensorCPU only: under the cuda driver musa's
# nested tensors dispatch to NestedTensorCUDA, which has no kernel (as on CUDA itself).
NO_CUDA_KERNEL = {"sum_last": pytest.mark.requires_host_driver(
    "PyTorch has no NestedTensorCUDA kernel for sum.dim_IntList (NestedTensorCPU only)")}


@pytest.mark.parametrize("name", [pytest.param(n, marks=NO_CUDA_KERNEL.get(n, ()))
                                  for n in sorted(OPS)])
def test_strided_nested_op_matches_cpu(name):
    cpu, musa = _pair()
    _same(OPS[name](musa), OPS[name](cpu))


def test_nested_sizes_and_printing():
    cpu, musa = _pair()
    assert musa.size(0) == 3 and musa.dim() == 3
    # the metadata stays on the host, as CUDA's does
    assert musa._nested_tensor_size().device.type == "cpu"
    assert torch.equal(musa._nested_tensor_size(), cpu._nested_tensor_size())
    assert "device='musa:0'" in repr(musa)


def test_inplace_writes_musa_memory():
    cpu, musa = _pair()
    out = musa.mul_(3)
    assert out is musa
    cpu.mul_(3)
    _same(musa, cpu)
    musa.add_(musa)
    cpu.add_(cpu)
    _same(musa, cpu)


def test_copy_between_devices():
    cpu, musa = _pair()
    back = musa.to("cpu")
    assert back.device.type == "cpu" and back.is_nested
    _same(back.to("musa"), cpu)
    z = torch.nested.nested_tensor([torch.zeros(*s) for s in ROWS], device="musa")
    z.copy_(cpu)
    _same(z, cpu)


def test_nested_from_mask_and_padded():
    torch.manual_seed(1)
    dense = torch.randn(2, 4, 3)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    cpu = torch._nested_tensor_from_mask(dense, mask)
    musa = torch._nested_tensor_from_mask(dense.to("musa"), mask.to("musa"))
    _same(musa, cpu)
    sizes = cpu._nested_tensor_size()
    _same(torch._nested_from_padded(dense.to("musa"), sizes),
          torch._nested_from_padded(dense, sizes))


def test_strided_nested_autograd():
    cpu, musa = _pair(requires_grad=True)
    for nt in (cpu, musa):
        torch.nested.to_padded_tensor((nt * nt).relu(), 0.0).sum().backward()
    _same(musa.grad, cpu.grad)


def test_jagged_still_works():
    cpu, musa = _pair(layout=torch.jagged)
    out = (musa * 2).relu().softmax(-1)
    ref = (cpu * 2).relu().softmax(-1)
    assert out.values().device.type == "musa"
    torch.testing.assert_close(out.values().cpu(), ref.values())

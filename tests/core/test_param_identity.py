"""Module.to() moves Parameters in place, as on CUDA: the objects, their .grad,
their hooks and the optimizers that hold them survive every direction."""
import pytest
import torch
from torch import nn

from torch_musa.testing.reference import cpu_tolerance


def _model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))
    m[1].weight = m[0].weight  # tied, GPT-2 style (10x4 both)
    return m


def _step(m, device):
    x = torch.tensor([[1, 2, 3]], device=device)
    m(x).sum().backward()


MOVES = {
    ".to('musa')": lambda m: m.to("musa"),
    ".musa()": lambda m: m.musa(),
    "musa:0 -> musa:1": lambda m: m.to("musa:1"),
    ".cpu()": lambda m: m.cpu(),
    ".half()": lambda m: m.half(),
    ".to(bfloat16)": lambda m: m.to(torch.bfloat16),
    ".to('musa', float16)": lambda m: m.to("musa", torch.float16),
}


def test_shallow_copy_type_answers_as_for_cuda():
    cpu, musa = torch.ones(2), torch.ones(2, device="musa")
    f = torch._has_compatible_shallow_copy_type
    last = torch.musa.device_count() - 1
    assert f(cpu, musa) and f(musa, cpu) and f(musa, torch.ones(2, device=f"musa:{last}"))
    assert f(musa, musa.half())
    # Still False where the CPU device says False (layout or meta differ).
    assert not f(musa, torch.ones(2).to_sparse()) and not f(torch.ones(2).to_sparse(), musa)
    assert f(cpu, torch.ones(2, device="meta")) == f(musa, torch.ones(2, device="meta")) is False


_TWO_DEVICES = pytest.mark.requires_devices(2)  # moves to musa:1


@pytest.mark.parametrize("move", [pytest.param(m, marks=_TWO_DEVICES) if "musa:1" in m else m
                                  for m in MOVES])
def test_parameters_grads_and_hooks_keep_identity(move):
    m = _model().to("musa") if move in (".cpu()", "musa:0 -> musa:1", ".half()", ".to(bfloat16)") else _model()
    device = next(m.parameters()).device
    _step(m, device)
    params = list(m.parameters())
    grads = [p.grad for p in params]
    seen = []
    params[0].register_hook(lambda g: seen.append(g.device))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    MOVES[move](m)

    assert [id(p) for p in m.parameters()] == [id(p) for p in params]
    assert m[1].weight is m[0].weight and len(list(m.parameters())) == 2
    assert all(p.grad is g for p, g in zip(params, grads))
    new_device, new_dtype = params[0].device, params[0].dtype
    assert all(p.grad.device == new_device and p.grad.dtype == new_dtype for p in params)
    assert opt.param_groups[0]["params"][0] is params[0]
    for p in m.parameters():
        p.grad = None
    if new_dtype == torch.float32:
        _step(m, new_device)
        assert seen == [new_device]  # the hook survived and fired on the new device
        before = params[0].detach().clone()
        opt.step()
        assert not torch.equal(before, params[0].detach())  # the optimizer moved the module's weights


def test_set_data_across_devices():
    p = nn.Parameter(torch.ones(3))
    p.data = torch.full((3,), 2.0, device="musa")
    assert p.device.type == "musa" and p.requires_grad and p.sum().item() == 6.0
    p.data = torch.zeros(3)
    assert p.device.type == "cpu"


def test_optimizer_built_before_to_trains_the_moved_model():
    torch.manual_seed(0)
    ref = nn.Linear(3, 2)
    m = nn.Linear(3, 2)
    m.load_state_dict(ref.state_dict())
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=0.1)
    opt = torch.optim.AdamW(m.parameters(), lr=0.1)  # before .to(), as accelerate does
    m.to("musa")
    x = torch.randn(5, 3)
    for _ in range(3):
        for model, o, xx in ((ref, opt_ref, x), (m, opt, x.to("musa"))):
            o.zero_grad()
            model(xx).pow(2).sum().backward()
            o.step()
    tol = cpu_tolerance()  # bit for bit under the host driver
    torch.testing.assert_close(m.weight.cpu(), ref.weight.cpu(), **tol)
    torch.testing.assert_close(m.bias.cpu(), ref.bias.cpu(), **tol)
    assert not torch.equal(ref.weight.cpu(), nn.Linear(3, 2).weight)

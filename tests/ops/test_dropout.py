"""aten::dropout on musa takes the CPU device's composite under the host driver:
the same draws and the same results as on the CPU device, in training, in
inference mode, and through autograd."""
import pytest
import torch

import torch_musa  # noqa: F401


def _both(fn, seed=7):
    out = {}
    for dev in ("cpu", "musa"):
        torch.manual_seed(seed)
        out[dev] = fn(dev)
    return out["cpu"], out["musa"]


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.requires_host_driver("the cuda driver keeps CUDA's fused native_dropout (Philox draws)")
def test_training_dropout_matches_cpu_bitwise(p):
    def run(dev):
        x = torch.randn(64, 33, device=dev, requires_grad=True)
        y = torch.nn.functional.dropout(x, p, training=True)
        (y * torch.arange(33, device=dev)).sum().backward()
        return y.detach().cpu(), x.grad.cpu(), torch.rand(3, device=dev).cpu()

    cpu, musa = _both(run)
    for a, b in zip(cpu, musa):
        assert torch.equal(a, b)  # the generator advanced alike, too


@pytest.mark.requires_host_driver(
    "the cuda driver keeps CUDA's fused native_dropout (NativeDropoutBackward0)")
def test_autograd_records_the_composite():
    x = torch.randn(8, device="musa", requires_grad=True)
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    assert type(y.grad_fn).__name__ == "MulBackward0"


@pytest.mark.requires_host_driver("the cuda driver keeps CUDA's fused native_dropout (Philox draws)")
def test_inference_mode_matches_cpu():
    def run(dev):
        with torch.inference_mode():
            return torch.dropout(torch.randn(100, device=dev), 0.3, True).cpu()

    cpu, musa = _both(run)
    assert torch.equal(cpu, musa)


def test_edge_cases():
    x = torch.randn(5, device="musa")
    assert torch.dropout(x, 0.5, False) is x
    assert torch.dropout(x, 0.0, True) is x
    assert torch.equal(torch.dropout(x, 1.0, True).cpu(), torch.zeros(5))
    assert torch.dropout(torch.empty(0, device="musa"), 0.5, True).numel() == 0
    with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        torch.dropout(x, 1.5, True)
    assert torch.dropout(x, 0.5, False).device.type == "musa"  # still usable afterwards

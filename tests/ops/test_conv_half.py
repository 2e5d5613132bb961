"""float16/bfloat16 convolutions accumulate in float32, as CUDA's and MUSA's kernels do
(issue 23, item 9): forward and backward of conv2d and conv_transpose2d are measured
against float64 on the same rounded inputs."""
import pytest
import torch
import torch.nn.functional as F

CASES = {
    "conv2d": lambda x, w: F.conv2d(x, w, padding=1),
    "conv_transpose2d": lambda x, w: F.conv_transpose2d(x, w, padding=1),
}
# One rounding of the result costs about ulp/sqrt(12) relative (RMS): 2**-11/1.7 for float16
# and 2**-8/1.7 for bfloat16; accumulating in half precision costs 2-3 times that.
ONE_ROUNDING = {torch.float16: 2.1e-4, torch.bfloat16: 1.7e-3}


def _rel(a, ref):
    return ((a.double() - ref).norm() / ref.norm()).item()


def _run(name, dtype, device):
    torch.manual_seed(0)
    x = torch.randn(4, 32, 16, 16).to(dtype)
    w = (torch.randn(32, 32, 3, 3) * 0.05).to(dtype)
    g = torch.randn(4, 32, 16, 16).to(dtype)
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    CASES[name](xd, wd).backward(g.double())
    refs = (CASES[name](xd, wd).detach(), xd.grad, wd.grad)
    xm, wm = x.to(device).requires_grad_(), w.to(device).requires_grad_()
    y = CASES[name](xm, wm)
    y.backward(g.to(device))
    return (y.detach().cpu(), xm.grad.cpu(), wm.grad.cpu()), refs


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", CASES)
def test_half_convolution_rounds_once(name, dtype):
    if not torch.musa.is_bf16_supported() and dtype == torch.bfloat16:
        pytest.skip("the profile has no bfloat16")
    got, refs = _run(name, dtype, "musa")
    for label, a, r in zip(("forward", "grad input", "grad weight"), got, refs):
        assert a.dtype == dtype
        err = _rel(a, r)
        assert err < 1.3 * ONE_ROUNDING[dtype], f"{name} {dtype} {label}: {err:.2e} relative"


@pytest.mark.requires_host_driver("compares with the CPU's float32 kernels bit for bit")
def test_half_convolution_is_the_float32_result_rounded():
    torch.manual_seed(0)
    x, w, g = torch.randn(2, 8, 9, 9).half(), torch.randn(8, 8, 3, 3).half(), torch.randn(2, 8, 9, 9).half()
    xf, wf = x.float().requires_grad_(), w.float().requires_grad_()
    F.conv2d(xf, wf, padding=1).backward(g.float())
    xm, wm = x.musa().requires_grad_(), w.musa().requires_grad_()
    y = F.conv2d(xm, wm, padding=1)
    y.backward(g.musa())
    assert torch.equal(y.cpu(), F.conv2d(x.float(), w.float(), padding=1).half())
    assert torch.equal(xm.grad.cpu(), xf.grad.half()) and torch.equal(wm.grad.cpu(), wf.grad.half())

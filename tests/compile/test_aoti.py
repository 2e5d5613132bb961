"""AOTInductor and ``cpp_wrapper=True`` on musa (torch_musa/_inductor/aoti.py): a musa
graph compiles as the kernel device's (the CPU's under the host driver, CUDA's under
the cuda driver), and runs on musa tensors through the musa runner
(csrc/aten/aoti_runner.cpp). Under every driver the reference is eager musa, within
float tolerance; under the host driver also the same model compiled for the CPU
device: the same generated code, so the same bits. Compiling a package runs g++: slow."""
import json
import os
import zipfile

import pytest
import torch
import torch._dynamo
from torch import nn

from ._route import KIND

pytestmark = pytest.mark.slow
CPU_BITS = pytest.mark.requires_host_driver("the host driver's packages hold the CPU's kernels")


class Net(nn.Module):
    """A convolution, BatchNorm (buffers), a LayerNorm, an MLP with GELU, a softmax:
    extern and fused kernels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)  # over 8 channels: its buffers are not inlined
        self.norm = nn.LayerNorm(16 * 5 * 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 16)
        self.fc2 = nn.Linear(16, 6)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x))).flatten(1)
        return torch.softmax(self.fc2(nn.functional.gelu(self.fc1(self.norm(h)))), dim=1), h


def _model_and_input():
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():  # statistics that are not the identity
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    return net, torch.randn(2, 3, 5, 5)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """The model packaged from musa and from the CPU device, with eager musa's outputs."""
    model, x = _model_and_input()
    root = tmp_path_factory.mktemp("aoti")
    made = {}
    for device in ("musa", "cpu"):
        m, xd = model.to(device), x.to(device)  # (the cuda driver's musa is the GPU)
        batch = torch.export.Dim("batch", min=1, max=16)
        ep = torch.export.export(m, (xd,), dynamic_shapes=({0: batch},))
        made[device] = torch._inductor.aoti_compile_and_package(
            ep, package_path=str(root / f"{device}.pt2"))
    with torch.no_grad():
        eager = [t.cpu() for t in model.to("musa")(x.to("musa"))]
    return made, x, eager


def test_package_runs_on_musa_as_eager_musa_does(packages):
    made, x, eager = packages
    metadata = torch._C._aoti.AOTIModelPackageLoader.load_metadata_from_package(
        made["musa"], "model")
    assert metadata["AOTI_DEVICE_KEY"] == "musa" and metadata["AOTI_MUSA_KERNEL_DEVICE"] == KIND
    before = torch.musa.memory_allocated()
    out, flat = torch._inductor.aoti_load_package(made["musa"])(x.to("musa"))
    assert out.device == flat.device == torch.device("musa", 0)
    # The model's results are musa memory, counted as such.
    assert torch.musa.memory_allocated() - before >= out.nbytes + flat.nbytes
    torch.testing.assert_close(out.cpu(), eager[0], atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(flat.cpu(), eager[1], atol=1e-4, rtol=1e-3)
    # Another batch size (the batch dimension was exported as dynamic), on a side stream.
    x5 = torch.randn(5, *x.shape[1:])
    stream = torch.musa.Stream()
    with torch.musa.stream(stream):
        out5, _ = torch._inductor.aoti_load_package(made["musa"])(x5.to("musa"))
    stream.synchronize()
    with torch.no_grad():
        ref5 = _model_and_input()[0](x5)[0]  # the same weights (seeded), eager on the CPU
    assert out5.shape == (5, 6)
    torch.testing.assert_close(out5.cpu(), ref5, atol=1e-4, rtol=1e-3)


def test_package_of_another_driver_is_refused_clearly(packages, tmp_path):
    made, x, _ = packages
    other = {"cpu": "cuda", "cuda": "cpu"}[KIND]
    moved = tmp_path / "other.pt2"
    with zipfile.ZipFile(made["musa"]) as src, zipfile.ZipFile(moved, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("_metadata.json"):
                metadata = json.loads(data)
                metadata["AOTI_MUSA_KERNEL_DEVICE"] = other
                data = json.dumps(metadata).encode()
            dst.writestr(item, data)
    driver = {"cpu": "host", "cuda": "cuda"}
    with pytest.raises(RuntimeError, match=f"holds {other} kernels, but the {driver[KIND]} driver "
                       f"runs {KIND} kernels: load it under the {driver[other]} driver"):
        torch._inductor.aoti_load_package(str(moved))(x.to("musa"))
    assert os.path.exists(made["musa"])
    out, _ = torch._inductor.aoti_load_package(made["musa"])(x.to("musa"))  # still usable
    assert out.device.type == "musa"


@CPU_BITS
def test_package_runs_on_musa_as_the_cpu_package_does(packages):
    made, x, eager = packages
    out, flat = torch._inductor.aoti_load_package(made["musa"])(x.to("musa"))
    ref_out, ref_flat = torch._inductor.aoti_load_package(made["cpu"])(x)
    assert torch.equal(out.cpu(), ref_out) and torch.equal(flat.cpu(), ref_flat)
    torch.testing.assert_close(out.cpu(), eager[0])
    torch.testing.assert_close(flat.cpu(), eager[1])
    # Another batch size (the batch dimension was exported as dynamic).
    x5 = torch.randn(5, *x.shape[1:])
    out5, _ = torch._inductor.aoti_load_package(made["musa"])(x5.to("musa"))
    assert out5.shape == (5, 6)
    assert torch.equal(out5.cpu(), torch._inductor.aoti_load_package(made["cpu"])(x5)[0])


@pytest.mark.requires_devices(2)
def test_package_runs_on_the_inputs_musa_device(packages):
    made, x, eager = packages
    out, _ = torch._inductor.aoti_load_package(made["musa"])(x.to("musa:1"))
    assert out.device == torch.device("musa", 1)
    torch.testing.assert_close(out.cpu(), eager[0])
    with pytest.raises(RuntimeError, match="loaded for musa:0 but its inputs are on musa:1"):
        torch._inductor.aoti_load_package(made["musa"], device_index=0)(x.to("musa:1"))


def test_real_torch_musa_loader_and_clear_errors(packages):
    from torch_musa._export import MUSA_SO_UNSUPPORTED, aot_load
    from torch_musa._inductor.package import load_package

    made, x, eager = packages
    out, _ = load_package(made["musa"], "musa:0")(x.to("musa"))
    torch.testing.assert_close(out.cpu(), eager[0])
    with pytest.raises(RuntimeError, match="takes musa tensors; input 0 is on cpu"):
        torch._inductor.aoti_load_package(made["musa"])(x)
    with pytest.raises(RuntimeError, match="Unsupported device xpu"):
        load_package(made["musa"], "xpu")
    with pytest.raises(RuntimeError) as err:
        aot_load("model.so", "musa")
    assert str(err.value) == MUSA_SO_UNSUPPORTED


def _compiled_with_cpp_wrapper(model, x):
    """``model`` compiled with ``cpp_wrapper=True`` and run on ``x``: its outputs and
    the generated code (a fresh dynamo cache around it)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch(cpp_wrapper=True), torch.no_grad():
            return run_and_get_code(torch.compile(model), x)
    finally:
        torch._dynamo.reset()


def test_cpp_wrapper_compile_runs_the_kernel_devices_wrapper():
    model, x = _model_and_input()
    musa, code = _compiled_with_cpp_wrapper(model.to("musa"), x.to("musa"))
    assert any(f"cpp_wrapper/{KIND}.h" in c for c in code)  # the kernel device's C++ wrapper
    with torch.no_grad():
        eager = model(x.to("musa"))
    for m, e in zip(musa, eager):
        assert m.device == torch.device("musa", 0)
        torch.testing.assert_close(m.cpu(), e.cpu(), atol=1e-4, rtol=1e-3)


@CPU_BITS
def test_cpp_wrapper_compile_is_the_cpu_one():
    model, x = _model_and_input()
    musa, code = _compiled_with_cpp_wrapper(model.to("musa"), x.to("musa"))
    cpu, _ = _compiled_with_cpp_wrapper(model.cpu(), x)
    assert any("cpp_wrapper/cpu.h" in c for c in code)  # the C++ wrapper, the CPU's
    for m, c in zip(musa, cpu):
        assert m.device == torch.device("musa", 0)
        assert torch.equal(m.cpu(), c)


@CPU_BITS
def test_cpp_wrapper_training_step_is_the_cpu_one():
    torch._dynamo.reset()
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    musa = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to("musa")
    musa.load_state_dict(cpu.state_dict())
    x = torch.randn(6, 8)
    try:
        with torch._inductor.config.patch(cpp_wrapper=True):
            loss_musa = torch.compile(musa)(x.to("musa")).square().sum()
            loss_musa.backward()
            torch._dynamo.reset()
            loss_cpu = torch.compile(cpu)(x).square().sum()
            loss_cpu.backward()
    finally:
        torch._dynamo.reset()
    assert loss_musa.device.type == "musa" and torch.equal(loss_musa.cpu(), loss_cpu)
    for m, c in zip(musa.parameters(), cpu.parameters()):
        assert m.grad.device.type == "musa" and torch.equal(m.grad.cpu(), c.grad)

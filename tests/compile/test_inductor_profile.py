"""torch.profiler over torch.compile'd musa code: each of Inductor's compiled kernels is an
op of its own name with its span as musa device time, as Triton's kernels are on CUDA;
extern kernels (mm) keep theirs. Compiling is slow on two cores."""
import json

import pytest
import torch
import torch._dynamo
from torch.profiler import ProfilerActivity, profile

from torch_musa.config import CONFIG

DEVICE_KINDS = (torch.autograd.DeviceType.PrivateUse1, torch.autograd.DeviceType.CUDA)


def _fn(x, w):
    return torch.softmax(torch.relu(x @ w) + x.sin(), dim=-1) * 2


@pytest.mark.slow
def test_compiled_kernels_report_device_time(tmp_path):
    torch._dynamo.reset()
    torch.manual_seed(0)
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    compiled = torch.compile(_fn)
    mx, mw = x.to("musa"), w.to("musa")
    plain = compiled(mx, mw)  # compiles; the kernels run without the profile's calls
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        out = compiled(mx, mw)
    torch.testing.assert_close(plain.cpu(), _fn(x, w))
    assert torch.equal(out.cpu(), plain.cpu())
    kernels = [e for e in prof.events() if e.device_type in DEVICE_KINDS]
    assert kernels
    if CONFIG.driver != "host":  # Inductor's Triton kernels for the GPU, from CUPTI
        assert all(k.time_range.elapsed_us() >= 0 for k in kernels)
        return
    fused = [k for k in kernels if k.name.startswith("musa_kernel:cpp_fused_")]
    assert fused, sorted({k.name for k in kernels})
    assert any(k.name.startswith("musa_kernel:aten::mm") for k in kernels)  # extern (mm.out)
    # Each compiled kernel is an op of its name, which holds its one kernel.
    ops = [e for e in prof.events()
           if e.name.startswith("cpp_fused_") and e.device_type not in DEVICE_KINDS]
    assert sorted(f"musa_kernel:{op.name}" for op in ops) == sorted(k.name for k in fused)
    assert all(len(op.kernels) == 1 for op in ops)
    rows = {e.key: e for e in prof.key_averages()}
    assert all(rows[op.name].self_device_time_total > 0 for op in ops)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    names = {e["name"] for e in trace if e.get("cat") == "kernel"}
    assert {k.name for k in fused} <= names


@pytest.mark.slow
def test_replayed_musa_graph_kernels_report_device_time():
    # mode="reduce-overhead": replays of a MUSA graph call the captured C++ kernels again;
    # each shows as its kernel under the replay's host-call op, by the kernel's name.
    torch._dynamo.reset()
    torch.manual_seed(0)
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    compiled = torch.compile(_fn, mode="reduce-overhead")
    mx, mw = x.to("musa"), w.to("musa")
    for _ in range(3):  # warm-up, capture, replay
        compiled(mx, mw)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        out = compiled(mx, mw)
    torch.testing.assert_close(out.cpu(), _fn(x, w))
    kernels = {e.name for e in prof.events() if e.device_type in DEVICE_KINDS}
    if CONFIG.driver == "host":
        assert any(k.startswith("musa_kernel:cpp_fused_") for k in kernels), sorted(kernels)
        assert any(k.startswith("musa_kernel:aten::mm") for k in kernels), sorted(kernels)
    else:
        assert kernels

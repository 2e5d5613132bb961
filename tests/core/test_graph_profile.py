"""MUSA graph replays under torch.profiler (ProfilerActivity.MUSA): each replayed kernel is
in the profile as an eager one is; torch.musa.update_musa_graph_with_profile is the real
torch_musa's hook for this (it re-instantiates graphs there), which has nothing to do here."""
import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_musa  # noqa: F401

DEVICE_TYPE = torch.autograd.DeviceType.PrivateUse1
# Under the cuda driver a replay is one CUDA graph launch: CUPTI (ProfilerActivity.CUDA)
# reports its cuBLAS kernels under their own names, ProfilerActivity.MUSA sees none.


def _captured():
    x = torch.randn(128, 128, device="musa")
    torch.musa.synchronize()
    g = torch.musa.MUSAGraph()
    with torch.musa.graph(g):
        out = (x @ x).relu().sum(0)
    return g, x, out


@pytest.mark.requires_host_driver("musa kernel events of a host-driver replay")
def test_replayed_kernels_are_in_the_profile(tmp_path):
    g, x, out = _captured()
    for _ in range(3):  # replays before the profile are not in it
        g.replay()
    assert torch.musa.update_musa_graph_with_profile() is None
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        for _ in range(2):
            g.replay()
        torch.musa.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == DEVICE_TYPE]
    for op in ("mm", "relu", "sum"):  # structured ops run as their out= overloads (mm.out)
        n = sum(k.split(".")[0] == f"musa_kernel:aten::{op}" for k in kernels)
        assert n == 2, (op, kernels)
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::mm"].count == 2 and rows["aten::mm"].device_time_total > 0
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    mm = [e for e in events
          if e.get("cat") == "kernel" and e["name"].startswith("musa_kernel:aten::mm")]
    assert len(mm) == 2 and all(e["dur"] > 0 for e in mm)
    # and the replays did the work
    x.copy_(torch.randn(128, 128))
    g.replay()
    ref = (x.cpu() @ x.cpu()).relu().sum(0)
    torch.testing.assert_close(out.cpu(), ref)


def test_hook_is_torch_musa_name_and_callable_with_no_graphs():
    assert torch_musa.update_musa_graph_with_profile is torch.musa.update_musa_graph_with_profile
    torch.musa.update_musa_graph_with_profile()  # no live graph: nothing to do, no error

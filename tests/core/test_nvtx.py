"""torch.musa.nvtx: torch.cuda.nvtx's ranges and marks, visible in profiler traces."""
import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile


def test_ranges_and_marks_show_in_the_trace(tmp_path):
    nvtx = torch.musa.nvtx
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert nvtx.range_push("outer") == 0
        assert nvtx.range_push("inner") == 1
        torch.ones(4, device="musa").sum()
        assert nvtx.range_pop() == 1
        assert nvtx.range_pop() == 0
        rid = nvtx.range_start("started")
        nvtx.mark("here")
        nvtx.range_end(rid)
        with nvtx.range("step {}", 3):
            torch.ones(2, device="musa")
    names = [e.name for e in prof.events()]
    for name in ("outer", "inner", "started", "here", "step 3"):
        assert name in names
    inner = next(e for e in prof.events() if e.name == "inner")
    outer = next(e for e in prof.events() if e.name == "outer")
    assert outer.time_range.start <= inner.time_range.start and inner.time_range.end <= outer.time_range.end
    assert any(c.name.startswith("aten::") for c in inner.cpu_children)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    assert {"outer", "step 3"} <= {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}


def test_unbalanced_calls():
    nvtx = torch.musa.nvtx
    assert nvtx.range_pop() == -1
    with pytest.raises(ValueError, match="no open range with id 12345"):
        nvtx.range_end(12345)

"""Memory history and snapshots in torch.cuda.memory._snapshot()'s format, read by
PyTorch's own memory visualiser (torch.cuda._memory_viz), and memory_stats_all."""
import pickle

import pytest
import torch
from torch.cuda import _memory_viz

MiB = 1 << 20

# Under the cuda driver torch.musa.memory reads CUDA's history: on the H200 the frames,
# the trace order, the visualiser, the OOM entry, memory_stats_all and the profiler's
# memory events held as here. The tests marked HOST did not.
HOST = pytest.mark.requires_host_driver(
    "the host allocator's history; under the cuda driver torch.musa.memory reads CUDA's")


@pytest.fixture(autouse=True)
def history_off(empty_musa_cache):
    yield
    torch.musa.memory._record_memory_history(None, clear_history=True)


def make_tensor_here():
    return torch.empty(3 * MiB, dtype=torch.uint8, device="musa")


def block_at(snapshot, address):
    for seg in snapshot["segments"]:
        for b in seg["blocks"]:
            if b["address"] == address:
                return seg, b
    raise AssertionError(f"no block at {address:#x}")


def test_snapshot_names_the_python_frames_of_each_allocation():
    torch.musa.memory._record_memory_history(stacks="python")
    x = make_tensor_here()
    snap = torch.musa.memory._snapshot()
    assert set(snap) >= {"segments", "device_traces"}
    seg, block = block_at(snap, x.data_ptr())
    assert block["state"] == "active_allocated" and block["requested_size"] == 3 * MiB
    assert block["size"] == 3 * MiB and seg["total_size"] == 20 * MiB
    assert seg["segment_type"] == "large" and seg["segment_pool_id"] == (0, 0)
    names = [(f["name"], f["filename"]) for f in block["frames"]]
    assert ("make_tensor_here", __file__) in names
    assert all({"filename", "line", "name"} <= set(f) for f in block["frames"])
    # every block of a segment, allocated or not, adds up to the segment
    for s in snap["segments"]:
        assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
        assert s["allocated_size"] == sum(b["size"] for b in s["blocks"]
                                          if b["state"] == "active_allocated")


def test_trace_records_allocs_frees_and_segments_in_order():
    torch.musa.memory._record_memory_history(stacks="python")
    x = make_tensor_here()
    addr = x.data_ptr()
    del x
    torch.musa.empty_cache()
    trace = torch.musa.memory._snapshot()["device_traces"][0]
    mine = [e["action"] for e in trace if e.get("addr") == addr]
    assert mine == ["segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"]
    alloc = next(e for e in trace if e["action"] == "alloc" and e["addr"] == addr)
    assert alloc["size"] == 3 * MiB and alloc["stream"] == 0 and alloc["time_us"] > 0
    assert any(f["name"] == "make_tensor_here" for f in alloc["frames"])
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)


def test_memory_viz_reads_the_snapshot(tmp_path):
    torch.musa.memory._record_memory_history(stacks="python")
    keep = [make_tensor_here(), torch.empty(100, device="musa")]
    gone = make_tensor_here()
    del gone
    path = tmp_path / "snapshot.pickle"
    torch.musa.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    summary = _memory_viz.segsum(snap)
    assert "segments: " in summary and "reserved" in summary
    trace = _memory_viz.trace(snap)
    assert "alloc" in trace and "free" in trace
    lines = _memory_viz.segments(snap, format_flamegraph=lambda lines: lines)  # no flamegraph.pl
    assert "make_tensor_here" in lines and "active_allocated" in lines
    for html in (_memory_viz.trace_plot(snap), _memory_viz.segment_plot(snap)):
        assert html.startswith("<!DOCTYPE html>") or "<html" in html[:200]
    del keep


@HOST
def test_state_only_keeps_frames_without_a_trace_and_none_stops():
    torch.musa.memory._record_memory_history("state", stacks="python")
    x = make_tensor_here()
    snap = torch.musa.memory._snapshot()
    assert block_at(snap, x.data_ptr())[1]["frames"]
    assert snap["device_traces"][0] == []
    torch.musa.memory._record_memory_history(None)
    y = make_tensor_here()
    snap = torch.musa.memory._snapshot()
    assert block_at(snap, y.data_ptr())[1]["frames"] == []


@HOST
def test_max_entries_keeps_the_newest_and_skip_actions():
    torch.musa.memory._record_memory_history(max_entries=4, stacks="python",
                                            skip_actions=["segment_alloc", "segment_free"])
    ptrs = []
    for _ in range(5):
        t = torch.empty(1000, dtype=torch.uint8, device="musa")
        ptrs.append(t.data_ptr())
        del t
    trace = torch.musa.memory._snapshot()["device_traces"][0]
    # the newest four: the last cycle and the snapshot itself (as on CUDA)
    assert [e["action"] for e in trace] == ["alloc", "free_requested", "free_completed", "snapshot"]
    assert trace[0]["addr"] == ptrs[-1]
    assert not any(e["action"].startswith("segment") for e in trace)


@HOST
def test_legacy_boolean_form_and_bad_arguments():
    torch.musa.memory._record_memory_history(True, trace_alloc_max_entries=100)
    x = make_tensor_here()
    assert torch.musa.memory._snapshot()["device_traces"][0]
    with pytest.raises(RuntimeError, match="context must be None, 'state', 'alloc' or 'all'"):
        torch.musa.memory._record_memory_history(context="everything")
    with pytest.raises(RuntimeError, match="Unknown TraceEntry action"):
        torch.musa.memory._record_memory_history(skip_actions=["nap"])
    del x


def test_oom_is_in_the_trace_with_the_free_memory():
    torch.musa.memory._record_memory_history(stacks="python")
    torch.musa.set_per_process_memory_fraction(64 * MiB / torch.musa.get_device_properties(0).total_memory)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(100 * MiB, dtype=torch.uint8, device="musa")
    finally:
        torch.musa.set_per_process_memory_fraction(1.0)
    oom = [e for e in torch.musa.memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert oom and oom[-1]["size"] == 100 * MiB and oom[-1]["device_free"] > 0


def test_memory_stats_all_adds_the_devices():
    x = make_tensor_here()
    total = torch.musa.memory_stats_all()
    per = [torch.musa.memory_stats(d) for d in range(torch.musa.device_count())]
    assert total["allocated_bytes.all.current"] == sum(p["allocated_bytes.all.current"] for p in per)
    assert total["reserved_bytes.all.peak"] == max(p["reserved_bytes.all.peak"] for p in per)
    del x


def test_profiler_sees_musa_memory_events():
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x = torch.empty(MiB, dtype=torch.uint8, device="musa")
        del x
    events = prof.events()
    empty = [e for e in events if e.name == "aten::empty"]
    freed = [e for e in events if e.name == "[memory]"]
    assert [e.device_memory_usage for e in empty] == [MiB]  # device memory, not CPU memory
    assert [e.device_memory_usage for e in freed] == [-MiB]
    assert all(e.cpu_memory_usage == 0 for e in empty + freed)

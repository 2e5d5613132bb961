"""benchmarks/step_phases.py: a training step's host time, phase by phase, on two devices."""
import json

import pytest
import torch_musa._driver

from tests.conftest import load_benchmark


@pytest.mark.parametrize("back_to_back", [False, True], ids=["idle_queue", "back_to_back"])
def test_phases_of_the_small_step_on_musa_and_the_cpu(tmp_path, back_to_back):
    phases = load_benchmark("step_phases")
    args = ["--devices", "musa,cpu", "--small", "--steps", "4", "--out", str(tmp_path)]
    assert phases.main(args + (["--back-to-back"] if back_to_back else [])) == 0
    stem = "step_phases_back_to_back" if back_to_back else "step_phases"
    result = json.loads((tmp_path / f"{stem}.json").read_text())
    assert result["back_to_back"] is back_to_back
    rows = {r["phase"]: r for r in result["rows"]}
    assert list(rows) == ["forward", "backward", "optimizer", "zero_grad", "step"]
    parts = ("forward", "backward", "optimizer", "zero_grad")
    for device in ("musa", "cpu"):
        assert all(rows[p][f"{device}_us"] > 0 for p in rows)
        # the phases' means add up to the step's (a phase timed twice or left out would not);
        # a step outlasts each of its phases, so its median is at least each phase's
        means = sum(rows[p][f"{device}_mean_us"] for p in parts)
        assert means == pytest.approx(rows["step"][f"{device}_mean_us"], rel=1e-6)
        assert all(rows["step"][f"{device}_us"] >= rows[p][f"{device}_us"] for p in parts)
    assert rows["step"]["ratio"] == pytest.approx(rows["step"]["musa_us"] / rows["step"]["cpu_us"])
    table = (tmp_path / f"{stem}.md").read_text()
    assert "| backward |" in table and "musa/cpu" in table
    assert ("back to back" in table) is back_to_back


def test_two_devices_are_required(tmp_path):
    phases = load_benchmark("step_phases")
    with pytest.raises(SystemExit):
        phases.main(["--devices", "musa", "--out", str(tmp_path)])


def test_cprofile_tables_name_the_step_s_calls_on_each_side(tmp_path):
    phases = load_benchmark("step_phases")
    assert phases.main(["--devices", "musa,cpu", "--small", "--steps", "2", "--cprofile",
                        "--out", str(tmp_path)]) == 0
    for device in ("musa", "cpu"):
        table = (tmp_path / f"step_phases_cprofile_{device}.txt").read_text()
        assert table.startswith(f"# {device}: cProfile over 5 steps")
        # the fused optimizer's one C++ entry per step, as cProfile counts it
        adamw = [line.split() for line in table.splitlines() if "_fused_adamw_" in line]
        assert [row[0] for row in adamw] == ["5"]


def test_ops_compare_the_two_steps_calls_syncs_and_allocations(tmp_path):
    phases = load_benchmark("step_phases")
    assert phases.main(["--devices", "musa,cpu", "--small", "--steps", "2", "--ops",
                        "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "step_phases_ops.json").read_text())
    assert result["devices"] == ["musa", "cpu"]
    # the CPU device has neither a sync debug mode nor allocator counters; musa has both
    assert result["syncs_per_step"]["cpu"] is None and result["allocator_per_step"]["cpu"] is None
    musa_alloc = result["allocator_per_step"]["musa"]
    assert musa_alloc["allocation.all.allocated"] > 0 and musa_alloc["num_alloc_retries"] == 0
    syncs = result["syncs_per_step"]["musa"]
    assert syncs is not None  # musa's sync debug mode, under either driver
    # The host driver's attention draws its dropout seed with .item(): reported as a sync.
    # Under the cuda driver the attention is CUDA's, which draws none.
    if torch_musa._driver.KERNEL_DEVICE == "cpu":
        assert any("_local_scalar_dense" in k for k in syncs)
    # rows are the calls whose counts differ, largest difference first
    diffs = [abs(r["diff"]) for r in result["calls"]]
    assert diffs and all(d > 0 for d in diffs) and diffs == sorted(diffs, reverse=True)
    assert all(r["diff"] == r["musa"] - r["cpu"] for r in result["calls"])
    assert result["self_us_total"]["musa"] > 0 and result["self_us_total"]["cpu"] > 0
    table = (tmp_path / "step_phases_ops.md").read_text()
    assert "| calls that differ (op <- caller) | musa | cpu |" in table
    assert not list(tmp_path.glob("step_phases_ops_*.json"))  # the sides' files are folded in

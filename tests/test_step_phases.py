"""benchmarks/step_phases.py: a training step's host time, phase by phase, on two devices."""
import json

import pytest

from tests.conftest import load_benchmark


def test_phases_of_the_small_step_on_musa_and_the_cpu(tmp_path):
    phases = load_benchmark("step_phases")
    assert phases.main(["--devices", "musa,cpu", "--small", "--steps", "4", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "step_phases.json").read_text())
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
    table = (tmp_path / "step_phases.md").read_text()
    assert "| backward |" in table and "musa/cpu" in table


def test_two_devices_are_required(tmp_path):
    phases = load_benchmark("step_phases")
    with pytest.raises(SystemExit):
        phases.main(["--devices", "musa", "--out", str(tmp_path)])

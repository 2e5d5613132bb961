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
    for device in ("musa", "cpu"):
        assert all(rows[p][f"{device}_us"] > 0 for p in rows)
        # medians of the phases need not add up to the step's median, but come close:
        # a phase timed twice or left out would be off by itself
        parts = sum(rows[p][f"{device}_us"] for p in ("forward", "backward", "optimizer", "zero_grad"))
        assert parts == pytest.approx(rows["step"][f"{device}_us"], rel=0.25)
    assert rows["step"]["ratio"] == pytest.approx(rows["step"]["musa_us"] / rows["step"]["cpu_us"])
    table = (tmp_path / "step_phases.md").read_text()
    assert "| backward |" in table and "musa/cpu" in table


def test_two_devices_are_required(tmp_path):
    phases = load_benchmark("step_phases")
    with pytest.raises(SystemExit):
        phases.main(["--devices", "musa", "--out", str(tmp_path)])

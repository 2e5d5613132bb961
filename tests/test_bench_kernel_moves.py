"""benchmarks/bench_kernel_moves.py on the host driver: every side of every row is timed
and both reports are written (on a GPU, scripts/gpu_run.sh's "moves" stage runs it)."""
import json

from tests.conftest import load_benchmark


def test_quick_run_times_each_side_and_writes_both_reports(tmp_path):
    bench = load_benchmark("bench_kernel_moves")
    assert bench.main(["--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "kernel_moves.json").read_text())
    kd = result["kernel_device"]  # the CPU under the host driver, cuda under the cuda driver
    assert kd in ("cpu", "cuda")
    names = [r["name"] for r in result["list_ops"]]
    assert names == ["fused AdamW, 16 x 64", "foreach add_, 16 x 64",
                     "fused AdamW, 148 x 64", "foreach add_, 148 x 64"]
    for r in result["list_ops"]:
        assert min(r["musa_us"], r["alias_us"], r[f"{kd}_us"]) > 0, r
        assert r["tensors"] in (16, 80, 148, 740)
    assert [r["tensors"] for r in result["moves"]] == [300, 300]
    # Both moves are timed directly (the results' row was once a difference of two
    # medians, and came out negative).
    assert all(r["us_per_tensor"] > 0 for r in result["moves"]), result["moves"]
    table = (tmp_path / "kernel_moves.md").read_text()
    assert "| fused AdamW, 148 x 64 | 740 |" in table and "300 results back to musa" in table

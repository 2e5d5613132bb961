"""benchmarks/bench_mccl.py --out: the Markdown table and the ratio chart next to the JSON."""
from tests.conftest import load_benchmark


def _bench():
    return load_benchmark("bench_mccl")


def test_report_has_every_size_and_the_machine(tmp_path):
    bench = _bench()
    rows = [{"bytes": b, "iters": 10, "mccl_us": 10.0, "ref_us": 9.0, "mccl_busbw_GBps": r * 2.0,
             "ref_busbw_GBps": 2.0, "ratio": r, "floor_ratio": 1.0} for b, r in ((1 << 20, 0.97), (1 << 30, 1.01))]
    result = {"world": 2, "rounds": 7, "stat": "min", "reference": "nccl", "rows": rows,
              "machine": {"torch": "2.11", "python": "3.12", "cpu_count": 32, "platform": "linux",
                          "musa_driver": "cuda", "gpus": ["H200", "H200"], "cuda": "13.0", "nccl": "2.27.3"}}
    bench.write_report(str(tmp_path), result)
    md = (tmp_path / "mccl_vs_nccl.md").read_text()
    assert "H200, H200" in md and "NCCL 2.27.3" in md
    assert "| 1 MB | 1.940 | 2.000 | 0.970 |" in md and "| 1 GB | 2.020 | 2.000 | 1.010 |" in md
    assert (tmp_path / "mccl_vs_nccl.png").stat().st_size > 1000
    assert bench.parse_size("1G") == 1 << 30 and bench.fmt_size(1 << 20) == "1 MB"

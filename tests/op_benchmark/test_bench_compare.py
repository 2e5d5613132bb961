"""--compare: two result files joined into one ratio table (and chart)."""
import json

import pytest

from torch_musa.op_benchmark import report
from torch_musa.op_benchmark.cli import main


def _row(tid, device, median, status="ok"):
    op = tid.split("/")[0]
    return {"id": tid, "op": op, "suite": op.split(".")[0], "params": {"N": 8}, "dtype": "float32",
            "mode": "fwd", "device": device, "status": status, "median_s": median}


def _doc(rows, **stack):
    return {"schema": report.SCHEMA, "stack": {"torch": "2.13.0", **stack}, "results": rows}


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_compare_same_devices():
    a = _doc([_row("s.add/N=8/float32/fwd", "musa", 2e-6), _row("s.add/N=8/float32/fwd", "cpu", 1e-6),
              _row("s.mul/N=8/float32/fwd", "musa", 4e-6), _row("s.only_a/N=8/float32/fwd", "musa", 1e-6)])
    b = _doc([_row("s.add/N=8/float32/fwd", "musa", 1e-6), _row("s.add/N=8/float32/fwd", "cpu", 1e-6),
              _row("s.mul/N=8/float32/fwd", "musa", 1e-5, status="wrong")])
    rows = report.compare_results(a, b)
    by = {(r["id"], r["device_a"]): r for r in rows}
    assert len(rows) == 3                          # only_a has no partner
    assert by[("s.add/N=8/float32/fwd", "musa")]["ratio"] == pytest.approx(0.5)
    assert by[("s.add/N=8/float32/fwd", "cpu")]["ratio"] == pytest.approx(1.0)
    assert by[("s.mul/N=8/float32/fwd", "musa")]["ratio"] is None   # a wrong result has no ratio
    text = report.compare_table(rows, "a.json", "b.json")
    assert "0.50x" in text and "WRONG" in text and "geometric mean" in text


def test_compare_across_single_device_files():
    a = _doc([_row("s.add/N=8/float32/fwd", "musa", 3e-6)])
    b = _doc([_row("s.add/N=8/float32/fwd", "cuda", 1e-6)])
    (r,) = report.compare_results(a, b)
    assert (r["device_a"], r["device_b"]) == ("musa", "cuda") and r["ratio"] == pytest.approx(1 / 3)


def test_compare_cli_writes_table_and_chart(tmp_path, capsys):
    a = _write(tmp_path, "before.json", _doc([_row("s.add/N=8/float32/fwd", "musa", 2e-6),
                                              _row("s.mul/N=8/float32/fwd", "musa", 1e-6)],
                                             driver="host"))
    b = _write(tmp_path, "after.json", _doc([_row("s.add/N=8/float32/fwd", "musa", 1e-6),
                                             _row("s.mul/N=8/float32/fwd", "musa", 3e-6)]))
    png, js = tmp_path / "cmp.png", tmp_path / "cmp.json"
    assert main(["--compare", a, b, "--plot", str(png), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "B/A" in out and "0.50x" in out and "3.00x" in out and "driver host" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(json.loads(js.read_text())["rows"]) == 2


def test_compare_rejects_other_json(tmp_path):
    bad = _write(tmp_path, "x.json", {"hello": 1})
    with pytest.raises(ValueError, match="not a torch_musa.op_benchmark result"):
        main(["--compare", bad, bad])

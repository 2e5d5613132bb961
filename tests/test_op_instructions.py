"""benchmarks/op_instructions.py: host instructions per op call, musa against the CPU device.

The counting itself needs valgrind, which CI does not install; these tests check what runs
under it (each op's worker, on both devices) and what the tool makes of callgrind's output."""
import os
import subprocess
import sys

import pytest

from tests.conftest import load_benchmark

tool = load_benchmark("op_instructions")


@pytest.mark.parametrize("device", ["musa", "cpu"])
def test_every_workers_call_runs_on_both_devices(tmp_path, device):
    for name, (entry, call) in tool.OPS.items():
        src = tmp_path / f"{entry}.py"
        src.write_text(tool.OP_WORKER.format(calls=6, call=call))
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        proc = subprocess.run([sys.executable, str(src), device], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, f"{name} on {device}: {proc.stderr[-1500:]}"


def test_totals_reads_callgrinds_summary(tmp_path):
    out = tmp_path / "callgrind.out"
    out.write_text("version: 1\ncreator: callgrind-3.19.0\nevents: Ir I1mr D1mr\n"
                   "fn=(1) main\n0 5 1 0\nsummary: 10414 27 3\n")
    assert tool.totals(str(out)) == {"Ir": 10414, "I1mr": 27, "D1mr": 3}
    (tmp_path / "empty.out").write_text("events: Ir\n")
    with pytest.raises(RuntimeError, match="no totals"):
        tool.totals(str(tmp_path / "empty.out"))


def test_report_gives_each_op_and_the_step():
    result = {"torch": "2.13.0", "commit": "abc1234", "ops": [
        {"op": "mm", "musa": 7918.0, "cpu": 5764.0, "ratio": 7918 / 5764, "extra": 2154.0}],
        "step": {"musa": {"Ir": 2.0e6, "I1mr": 3.0e4, "D1mr": 1.0e4},
                 "cpu": {"Ir": 1.6e6, "I1mr": 2.0e4, "D1mr": 8.0e3},
                 "ratio": {"Ir": 1.25, "I1mr": 1.5, "D1mr": 1.25}}}
    table = tool.markdown(result)
    assert "| mm | 7,918 | 5,764 | 1.374 | +2,154 |" in table
    assert "| L1 instruction misses | 30,000 | 20,000 | 1.500 |" in table
    assert "commit abc1234" in table


def test_refuses_unknown_ops_and_says_when_valgrind_is_missing(monkeypatch, capsys, tmp_path):
    with pytest.raises(SystemExit):
        tool.main(["--ops", "mm,nonesuch", "--out", str(tmp_path)])
    assert "unknown op(s) nonesuch" in capsys.readouterr().err
    monkeypatch.setattr(tool.shutil, "which", lambda name: None)
    assert tool.main(["--ops", "mm", "--out", str(tmp_path)]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())

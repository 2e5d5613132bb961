"""The command line end to end: a short two-device run with every output."""
import csv
import json

import pytest

from torch_musa.op_benchmark.cli import main


def test_two_device_run_writes_json_csv_png(tmp_path, musa, capsys):
    rc = main(["--device", "musa,cpu", "--operators", "relu,linear", "--dtype", "float32",
               "--test-name", "M=64", "--min-time", "0.002", "--warmup-iterations", "1",
               "--num-threads", "1", "--out-dir", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "musa/cpu" in out and "activation.relu/M=64,N=1024" in out and "linear.linear" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    st = doc["stack"]
    for k in ("torch", "torch_musa", "driver", "hardware_profile", "cpu_model", "num_threads"):
        assert st.get(k) not in (None, ""), k
    assert st["num_threads"] == 1 and st["devices"]["musa"]["name"] == st["hardware_profile"]
    rows = doc["results"]
    assert {r["device"] for r in rows} == {"musa", "cpu"}
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(r["median_s"] > 0 and r["p90_s"] >= r["p10_s"] for r in ok)
    assert all(r["checked"] for r in ok if r["device"] == "cpu")
    lin = [r for r in ok if r["op"] == "linear.linear" and r["mode"] == "fwd"]
    assert lin and all(r["gflops"] > 0 and r["gbps"] > 0 for r in lin)
    with open(tmp_path / "results.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert (tmp_path / "ratio.png").read_bytes()[:4] == b"\x89PNG"


def test_listing(capsys):
    assert main(["--list-ops", "--suite", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "softmax.softmax" in out and "softmax.log_softmax" in out
    assert main(["--list-tests", "--operators", "softmax.softmax", "--forward-only",
                 "--dtype", "float16"]) == 0
    lines = capsys.readouterr().out.split()
    assert lines == ["softmax.softmax/M=256,N=1024,dim=-1/float16/fwd"]


@pytest.mark.requires_profile("s80", reason="an error row needs a dtype the profile refuses: float64")
def test_error_row_does_not_crash(tmp_path, musa, capsys):
    # float64 is not on the MTT S80 profile: an error row, then the cpu timing
    bad = tmp_path / "f64.yaml"
    bad.write_text("cases:\n  - name: neg\n    op: torch.neg\n    dtypes: [float64]\n"
                   "    inputs: [{name: x, shape: [8]}]\n")
    rc = main(["--suite", str(bad), "--device", "musa,cpu", "--min-time", "0.002",
               "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "ERROR" in out and "Problems:" in out


def test_bad_device_and_dtype_are_clean_errors(capsys):
    assert main(["--device", "musa,nosuchdevice", "--operators", "neg", "--no-progress"]) == 2
    assert "--device" in capsys.readouterr().err
    assert main(["--dtype", "float17", "--operators", "neg", "--no-progress"]) == 2
    assert "unknown dtype 'float17'" in capsys.readouterr().err

"""--capture: dispatch-level tracing of a real run, written as a suite that runs."""
import textwrap

import torch
from torch import nn

from torch_musa.op_benchmark import record
from torch_musa.op_benchmark.cli import main
from torch_musa.op_benchmark.config import expand, load_suite
from torch_musa.op_benchmark.runner import run_test


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def test_record_api_writes_a_runnable_suite(tmp_path, fast):
    m = _model()
    x = torch.randn(8, 16)
    with record() as rec:
        y = m(x)
        y.sum().backward()
        m(torch.randn(2, 16))                      # a second shape of the same ops
    path = rec.write_suite(str(tmp_path / "mlp.yaml"))
    suite = load_suite(path)
    by = {c.name: c for c in suite.cases}
    assert "addmm" in by and "relu" in by and "threshold_backward" in by   # forward and backward
    addmm = by["addmm"]
    assert addmm.op == "torch.ops.aten.addmm.default" and addmm.count == 4
    shapes = [combo["s1"] for _, combos, _ in addmm.configs for combo in combos]
    assert [8, 16] in shapes and [2, 16] in shapes and [8, 32] in shapes
    assert any(not i.contiguous for i in addmm.inputs)        # the transposed weight
    assert "t" not in by and "view" not in by                  # views move no data
    tests = expand([suite], tags=["captured"], operators=["addmm", "relu"])
    assert len(tests) == 6                    # 4 addmm shapes, 2 relu shapes
    for t in tests:
        (r,) = run_test(t, [torch.device("cpu")], fast)
        assert r["status"] == "ok", r


def test_integer_ranges_are_kept(tmp_path, fast):
    emb = nn.Embedding(50, 8)
    ids = torch.tensor([[3, 7, 49], [0, 1, 2]])
    with record() as rec:
        emb(ids)
    suite = load_suite(rec.write_suite(str(tmp_path / "emb.yaml")))
    (case,) = [c for c in suite.cases if c.name == "embedding"]
    spec = case.inputs[1]
    assert spec.dtype == "int64" and (spec.low, spec.high) == (0, 50)
    (t,) = expand([suite], operators=["embedding"], tags=["all"])
    (r,) = run_test(t, [torch.device("cpu")], fast)
    assert r["status"] == "ok"


def test_capture_cli_on_a_script_then_run_it_on_two_devices(tmp_path, musa, capsys):
    script = tmp_path / "train_step.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        import torch_musa
        dev = sys.argv[1]
        w = torch.randn(32, 8, device=dev, requires_grad=True)
        x = torch.randn(4, 32, device=dev)
        loss = torch.softmax(x @ w, dim=-1).sum()
        loss.backward()
    """))
    out = tmp_path / "step.yaml"
    assert main(["--capture", str(script), "--capture-output", str(out),
                 "--capture-device", "musa", "--", "musa"]) == 0
    assert "distinct cases" in capsys.readouterr().out
    suite = load_suite(str(out))
    names = {c.name for c in suite.cases}
    assert {"mm", "_softmax", "_softmax_backward_data"} <= names
    rc = main(["--suite", str(out), "--tag-filter", "captured", "--device", "musa,cpu",
               "--operators", "mm,_softmax", "--min-time", "0.002", "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0 and "step.mm" in text and "musa/cpu" in text


def test_capture_keeps_ops_before_a_crash(tmp_path, capsys):
    script = tmp_path / "crash.py"
    script.write_text("import torch\nx = torch.ones(3, 4)\ny = x.exp()\nraise ValueError('boom')\n")
    out = tmp_path / "crash.yaml"
    assert main(["--capture", str(script), "--capture-output", str(out)]) == 1
    assert "boom" in capsys.readouterr().err
    assert "exp" in {c.name for c in load_suite(str(out)).cases}

"""A sampled OpInfo sweep: op_db ops on musa against the CPU device.

CI runs every 15th op of the database (all its dtypes), which covers each
kind of op; `python -m torch_musa.testing.opinfo_sweep` runs the whole database.
Every failure must be listed, with its reason, in opinfo_expected_failures.yaml.
"""
from pathlib import Path

import pytest
import yaml

from torch_musa.testing import opinfo_sweep

EXPECTED = yaml.safe_load((Path(__file__).parent / "opinfo_expected_failures.yaml").read_text()) or {}
SAMPLE = 15


@pytest.fixture(scope="module")
def results():
    from torch_musa.ops import registry

    registry.set_fallback_mode("silent")
    try:
        return opinfo_sweep.sweep(sample=SAMPLE)
    finally:
        registry.set_fallback_mode("warn")


def test_every_expected_failure_has_a_reason():
    for op, dtypes in EXPECTED.items():
        for dtype, reason in dtypes.items():
            assert isinstance(reason, str) and len(reason) > 10, (op, dtype)


@pytest.mark.slow
@pytest.mark.requires_host_driver(
    "its expected-failures file is the S4000 host driver's; GPU kernels fail other pairs (cuDNN has "
    "no int64 convolution)")
def test_sampled_sweep_passes_or_fails_as_expected(results):
    unexpected = [r for r in results
                  if (r.forward == "fail" or r.backward == "fail") and r.dtype not in EXPECTED.get(r.op, {})]
    assert not unexpected, "\n".join(f"{r.op} {r.dtype}: {r.reason}" for r in unexpected)
    assert len([r for r in results if r.forward != "skip"]) >= 150
    # Pass rates where the hardware profile allows the computation (pairs that
    # need float64 on a profile without it fail by design, with a clear error).
    s = opinfo_sweep.summary(results)
    assert s["allowed_forward_pass_rate"] >= 0.99
    assert s["allowed_forward_backward_pass_rate"] >= 0.97


def test_summary_separates_the_profile_limit_and_draws_it(tmp_path):
    R = opinfo_sweep.Result
    limited = "aten::float_power: dtype Double (argument 'self') " + opinfo_sweep.PROFILE_LIMIT + " MTT S80."
    results = [R("add", "float32", "pass", "pass"), R("add", "int64", "pass", "n/a"),
               R("float_power", "float32", "fail", "skip", limited), R("sum", "bool", "pass", "fail", "grad"),
               R("cumsum", "float16", "fail", "skip", "mismatch"), R("odd", "bool", "skip", "skip")]
    s = opinfo_sweep.summary(results)
    assert (s["pairs"], s["skipped"], s["profile_limited"]) == (5, 1, 1)
    assert s["forward_pass_rate"] == 3 / 5 and s["forward_backward_pass_rate"] == 2 / 5
    assert s["allowed_forward_pass_rate"] == 3 / 4 and s["allowed_forward_backward_pass_rate"] == 2 / 4
    opinfo_sweep.write_png(results, str(tmp_path / "sweep.png"))
    assert (tmp_path / "sweep.png").stat().st_size > 1000


@pytest.mark.slow  # loads op_db
def test_ops_filter_runs_every_variant_of_the_named_ops(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert opinfo_sweep.main(["--ops", "max,abs", "--json", str(out)]) == 0
    import json

    results = json.loads(out.read_text())["results"]
    ops = {r["op"] for r in results}
    assert "abs" in ops and {"max.reduction_no_dim", "max.reduction_with_dim", "max.binary"} <= ops
    assert {op.split(".")[0] for op in ops} == {"max", "abs"}
    assert all(r["forward"] != "fail" for r in results)
    assert "op/dtype pairs" in capsys.readouterr().out


@pytest.mark.slow  # loads op_db
def test_an_unknown_op_names_the_closest():
    with pytest.raises(ValueError, match=r"not in op_db: mull \(closest: mul.*\); it has \d+ names"):
        opinfo_sweep.main(["--ops", "add,mull"])

"""A sampled module_db sweep: PyTorch's nn modules on musa against the CPU device.

CI runs a chosen set of modules, at least one of each kind (convolution, lazy, pooling,
normalisation with running stats, activation, dropout, loss, linear/embedding, recurrent,
attention/transformer, padding), in every dtype the profile has;
`python -m torch_musa.testing.module_sweep` runs the whole database. Every failure must be
listed, with the checks that fail and why, in module_sweep_expected_failures.yaml.
"""
import json
from pathlib import Path

import pytest
import torch
import yaml

from torch_musa.config import CONFIG
from torch_musa.testing.sweep_common import PROFILE_LIMIT, load_testing_db
from torch_musa.testing import module_sweep
from torch_musa.testing.module_sweep import CHECKS, Result

EXPECTED = yaml.safe_load((Path(__file__).parent / "module_sweep_expected_failures.yaml").read_text()) or {}
SAMPLE = [
    "nn.Conv2d", "nn.ConvTranspose1d", "nn.LazyConv1d",
    "nn.MaxPool2d", "nn.AdaptiveAvgPool3d", "nn.FractionalMaxPool2d", "nn.AvgPool3d",
    "nn.BatchNorm1d", "nn.InstanceNorm2d", "nn.GroupNorm", "nn.LayerNorm", "nn.RMSNorm",
    "nn.GELU", "nn.PReLU", "nn.Softmax", "nn.Dropout2d", "nn.AlphaDropout",
    "nn.CrossEntropyLoss", "nn.KLDivLoss", "nn.CTCLoss", "nn.NLLLoss",
    "nn.Linear", "nn.Bilinear", "nn.Embedding",
    "nn.LSTM", "nn.GRUCell", "nn.RNN",
    "nn.TransformerEncoder", "nn.MultiheadAttention",
    "nn.ReflectionPad2d", "nn.CircularPad1d",
]


@pytest.fixture(scope="module")
def results():
    from torch_musa.ops import registry

    registry.set_fallback_mode("silent")
    try:
        return module_sweep.sweep(modules=SAMPLE)
    finally:
        registry.set_fallback_mode("warn")


def test_every_expected_failure_names_a_module_dtype_checks_and_reason():
    names = {mi.name for mi in load_testing_db("common_modules", "module_db")}
    dtypes = {str(d).replace("torch.", "") for d in module_sweep.DTYPES}
    for module, by_dtype in EXPECTED.items():
        assert module in names, f"{module} is not in module_db"
        for dtype, entry in by_dtype.items():
            assert dtype in dtypes, (module, dtype)
            assert entry["fails"] and set(entry["fails"]) <= set(CHECKS), (module, dtype, entry)
            assert isinstance(entry["reason"], str) and len(entry["reason"]) > 20, (module, dtype)


@pytest.mark.slow
@pytest.mark.requires_host_driver("the list is the host driver's: dropout modules draw the CPU's "
                                  "masks there, and float32 results are the CPU kernels' bits")
def test_sampled_sweep_passes_or_fails_as_listed(results):
    ran = [r for r in results if r.forward != "skip"]
    assert {r.module for r in ran} == set(SAMPLE) and len(ran) >= 75
    # A pair is skipped only when the CPU itself cannot build or run it.
    odd_skips = [r for r in results if r.forward == "skip"
                 and not r.reason.startswith(("cpu raised", "module_inputs_func"))]
    assert not odd_skips, odd_skips
    problems = []
    for r in ran:
        failed = [c for c in CHECKS if getattr(r, c) == "fail"]
        listed = EXPECTED.get(r.module, {}).get(r.dtype)
        if listed is None and failed:
            problems.append(f"{r.module} {r.dtype} fails {failed}: {r.reason}")
        elif listed is not None and failed != listed["fails"]:
            problems.append(f"{r.module} {r.dtype} is listed as failing {listed['fails']} but fails "
                            f"{failed or 'nothing'}: update module_sweep_expected_failures.yaml ({r.reason})")
    assert not problems, "\n".join(problems)
    # 100 % of the pairs the CPU runs, but for the listed ones.
    listed = [r for r in ran if r.dtype in EXPECTED.get(r.module, {})]
    assert module_sweep.summary(results)["pass_rate"] == (len(ran) - len(listed)) / len(ran)


def _linear():
    return next(mi for mi in load_testing_db("common_modules", "module_db") if mi.name == "nn.Linear")


def test_identity_check_reports_replaced_parameters():
    """The identity check fails, naming the move, when .to() replaces the Parameter objects
    (forced here with PyTorch's own switch); the other checks are unaffected."""
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        r = module_sweep.run_case(_linear(), torch.float32, max_inputs=1)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    assert (r.forward, r.backward, r.identity, r.state_dict) == ("pass", "pass", "fail", "pass")
    assert ".to('musa') replaced 2/2 Parameter objects (weight;" in r.reason
    assert module_sweep.run_case(_linear(), torch.float32, max_inputs=1).passed


def test_half_precision_fallback_accepts_rounding_and_rejects_a_wrong_value():
    ref = torch.linspace(-3, 3, 16, dtype=torch.float32)
    cpu = ref.half()
    ulp_off = (cpu.float() + 2 ** -9 * (torch.arange(16) % 2)).half().to("musa")
    module_sweep._no_farther_than_cpu([cpu], [ulp_off], [ref], torch.float16)
    wrong = cpu.clone()
    wrong[3] += 0.25
    with pytest.raises(AssertionError, match=r"result 0 \(16,\): musa is 0.25"):
        module_sweep._no_farther_than_cpu([cpu], [wrong.to("musa")], [ref], torch.float16)


def test_summary_separates_the_profile_limit():
    limited = "forward[train]: RuntimeError: aten::mm: dtype Double " + PROFILE_LIMIT + " MTT S80."
    rs = [Result("nn.Linear", "float32", "pass", "pass", "pass", "pass", 3),
          Result("nn.GRU", "float16", "pass", "pass", "pass", "pass", 3, by_float32=["backward"]),
          Result("nn.LSTM", "float16", "pass", "fail", "pass", "pass", 3, "backward: mismatch"),
          Result("nn.Odd", "float32", "fail", "n/a", "n/a", "n/a", 1, limited),
          Result("nn.CTCLoss", "float16", "skip", "n/a", "n/a", "n/a", 0, "cpu raised NotImplementedError")]
    s = module_sweep.summary(rs)
    assert (s["pairs"], s["skipped"], s["profile_limited"]) == (4, 1, 1)
    assert s["pass_rate"] == 2 / 4 and s["allowed_pass_rate"] == 2 / 3
    assert s["backward_pass_rate"] == 3 / 4 and s["identity_pass_rate"] == 1.0 and s["passed_by_float32"] == 1
    assert rs[1].note == f"backward within {module_sweep.ERROR_FACTOR}x the CPU's distance from float32"


def test_cli_writes_table_json_markdown_and_chart(tmp_path, capsys):
    out = {k: tmp_path / f"sweep.{k}" for k in ("json", "md", "png")}
    assert module_sweep.main(["--modules", "nn.ReLU,nn.Linear", "--max-inputs", "1",
                              *(a for k, p in out.items() for a in (f"--{k}", str(p)))]) == 0
    printed = capsys.readouterr().out
    assert "nn.Linear" in printed and "module/dtype pairs the CPU runs" in printed
    data = json.loads(out["json"].read_text())
    lacking = set(CONFIG.profile.unsupported_dtypes())
    dtypes = [str(d).replace("torch.", "") for d in module_sweep.DTYPES if d not in lacking]
    assert data["summary"]["pairs"] == 2 * len(dtypes) and data["summary"]["pass_rate"] == 1.0
    assert {(r["module"], r["dtype"]) for r in data["results"]} == {
        (m, d) for m in ("nn.ReLU", "nn.Linear") for d in dtypes}
    assert "| nn.Linear | float16 | pass | pass | pass | pass | 1 |" in out["md"].read_text()
    assert data["results"][0]["by_float32"] == []
    assert out["png"].stat().st_size > 1000
    with pytest.raises(ValueError, match="not in module_db: nn.Nope"):
        module_sweep.main(["--modules", "nn.Nope"])

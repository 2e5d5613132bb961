"""Suite files are data (issue 35, item 7): a suite from elsewhere ran shell commands through a
``flops:`` formula (``().__class__.__base__.__subclasses__()`` out of the restricted eval) and an
``expr:`` (``torch.os.system(...)``). Formulas are arithmetic over the suite's names and
``op``/``expr`` name a callable on an allowlisted root; nothing is evaluated as Python."""
import math
import textwrap

import pytest
import torch

from torch_musa.op_benchmark import formulas
from torch_musa.op_benchmark.config import SuiteError, expand, parse_suite
from torch_musa.op_benchmark.runner import Settings, resolve_op, run_test

ESCAPE = ("[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]"
          "(['touch', '{marker}'])")


def _suite(case: str) -> str:
    return "cases:\n" + textwrap.indent(textwrap.dedent(case), "  ")


@pytest.mark.parametrize("key", ["flops", "bytes", "flops_bwd"])
def test_a_formula_cannot_reach_python_objects(tmp_path, key):
    marker = tmp_path / "pwned"
    text = _suite(f"""\
        - name: neg
          op: torch.neg
          inputs: [{{name: x, shape: [N]}}]
          {key}: "{ESCAPE.format(marker=marker)}"
          configs: [{{tags: [short], cross: {{N: [4]}}}}]
        """)
    with pytest.raises(SuiteError, match="not allowed in a suite formula") as e:
        parse_suite(text, "evil.yaml")
    assert str(e.value).startswith("evil.yaml:5: ")
    assert not marker.exists()


@pytest.mark.parametrize("spec", ["shape: ['{e}']", "shape: [4], dtype: int64, high: '{e}'"])
def test_shapes_and_bounds_are_formulas_too(tmp_path, spec):
    marker = tmp_path / "pwned"
    spec = spec.format(e=ESCAPE.format(marker=marker).replace("'", '"'))
    text = _suite(f"""\
        - name: neg
          op: torch.neg
          inputs: [{{name: x, {spec}}}]
        """)
    with pytest.raises(SuiteError, match="not allowed in a suite formula"):
        parse_suite(text, "evil.yaml")
    assert not marker.exists()


def test_an_argument_formula_cannot_import(tmp_path):
    marker = tmp_path / "pwned"
    text = _suite(f"""\
        - name: neg
          op: torch.neg
          inputs: [{{name: x, shape: [4]}}]
          args: ["$__import__('os').system('touch {marker}')"]
        """)
    with pytest.raises(SuiteError, match="not allowed in a suite formula"):
        parse_suite(text, "evil.yaml")
    assert not marker.exists()


@pytest.mark.parametrize("expr", ["torch.os.system('touch {marker}')",
                                  "x * torch.rsqrt(x.pow(2).mean(-1) + 1e-6)"])
def test_expr_names_a_callable_and_is_not_evaluated(tmp_path, expr):
    marker = tmp_path / "pwned"
    text = _suite(f"""\
        - name: run
          expr: "{expr.format(marker=marker)}"
          inputs: [{{name: x, shape: [4]}}]
        """)
    with pytest.raises(SuiteError, match="not the dotted name of a callable") as e:
        parse_suite(text, "evil.yaml")
    assert str(e.value).startswith("evil.yaml:3: ") and "composites.py" in str(e.value)
    assert not marker.exists()


def test_a_named_callable_stays_inside_torch(tmp_path):
    marker = tmp_path / "pwned"
    text = _suite(f"""\
        - name: run
          op: torch.os.system
          inputs: []
          args: ["touch {marker}"]
          check: false
        """)
    (t,) = expand([parse_suite(text, "evil.yaml")])
    (row,) = run_test(t, [torch.device("cpu")], Settings(min_time=0.001, warmup=0, rounds=1))
    assert row["status"] == "error" and "torch.os is not a namespace" in row["error"]
    assert not marker.exists()
    for name, why in [("torch.load", "read or write files"), ("torch.hub.help", "not a namespace"),
                      ("Tensor.__class__", "private"), ("os.system", "starts with one of"),
                      ("torch.ops.musa_ipc.from_fd", "internal"), ("F.__builtins__", "private"),
                      ("torch.utils.cpp_extension.load_inline", "read or write files")]:
        with pytest.raises(ValueError, match=why):
            resolve_op(name)


def test_allowed_callables_and_formulas():
    assert resolve_op("torch.add") is torch.add
    assert resolve_op("torch.nn.functional.gelu") is torch.nn.functional.gelu is resolve_op("F.gelu")
    assert resolve_op("aten._softmax.default") is torch.ops.aten._softmax.default
    assert resolve_op("torch.ops.aten.addmm.default") is torch.ops.aten.addmm.default
    assert resolve_op("Tensor.sum") is torch.Tensor.sum
    assert resolve_op("bench.rms_norm").__name__ == "rms_norm"
    env = {"B": 2, "H": 4, "L": 8, "D": 16, "causal": True, "M": 3, "N": 5, "elem": 4}
    ev = formulas.evaluate
    assert ev("4*B*H*L*L*D / (2 if causal else 1)", env) == 4 * 2 * 4 * 8 * 8 * 16 / 2
    assert ev("(M*N + N)*elem", env) == 80 and ev("-M // 2 % 5", env) == (-3 // 2) % 5
    assert ev("min(M, N) + max(M, N) + prod([M, N]) + math.sqrt(16)", env) == 3 + 5 + 15 + 4.0
    assert ev("torch.float16", env) is torch.float16 and math.isnan(ev("float('nan')", env))
    assert ev("[M, N]", env) == [3, 5] and ev("not causal or M > 2", env) is True
    for bad, why in [("10**10**10", "too large"), ("M.bit_length()", "not allowed"),
                     ("open('/etc/passwd')", "not allowed"), ("torch.add", "not a dtype"),
                     ("lambda: 0", "not allowed"), ("[M][0]", "not allowed"),
                     ("undeclared * 2", "does not declare"), ("'a' * 10", "only numbers"),
                     ("math.system", "not allowed"), ("(M for _ in 'ab')", "not allowed")]:
        with pytest.raises(formulas.FormulaError, match=why):
            ev(bad, env)

"""Suite files: parsing, expansion, filters, and errors that name file and line."""
import os
import textwrap

import pytest

from torch_musa.op_benchmark import config
from torch_musa.op_benchmark.config import SuiteError, expand, load_suite, parse_suite

GOOD = textwrap.dedent("""\
    suite: demo
    description: two cases
    cases:
      - name: add
        op: torch.add
        inputs: [{name: a, shape: [M, N]}, {name: b, shape: [N]}]
        dtypes: [float32, float16]
        backward: true
        flops: M*N
        bytes: (2*M*N + N)*elem
        configs:
          - {tags: [short], cross: {M: [2, 4], N: [8]}}
          - {tags: [long], list: [{M: 64, N: 64}], dtypes: [float32]}
      - name: rms
        expr: bench.rms_norm
        args: [$x, null, $eps]
        params: {eps: 1.0e-6}
        inputs:
          - {name: x, shape: [M, N]}
          - {name: i, shape: [M], dtype: int64, high: N}
        configs:
          - {tags: [short], cross: {M: [3], N: [5]}}
    """)


def test_good_suite_parses_and_expands():
    s = parse_suite(GOOD, "demo.yaml")
    assert s.name == "demo" and [c.name for c in s.cases] == ["add", "rms"]
    add = s.cases[0]
    assert add.op == "torch.add" and add.backward and add.inputs[1].shape == ["N"]
    assert add.inputs[0].init == "randn" and s.cases[1].inputs[1].init == "randint"
    short = expand([s], tags=["short"])
    ids = [t.id for t in short]
    # 2 M values x 2 dtypes x (fwd, fwd+bwd) + 1 rms test
    assert len(ids) == 9 and len(set(ids)) == 9
    assert "demo.add/M=2,N=8/float16/fwd+bwd" in ids
    assert "demo.rms/M=3,N=5/float32/fwd" in ids      # the constant eps is not in the id
    long = expand([s], tags=["long"])
    assert [t.id for t in long] == ["demo.add/M=64,N=64/float32/fwd",
                                    "demo.add/M=64,N=64/float32/fwd+bwd"]
    assert len(expand([s], tags=["all"])) == 11


def test_filters():
    s = parse_suite(GOOD, "demo.yaml")
    assert all(t.mode == "fwd" for t in expand([s], tags=["short"], forward_only=True))
    assert {t.dtype for t in expand([s], tags=["short"], dtypes=["fp16"])} == {"float16"}
    assert {t.case.name for t in expand([s], tags=["short"], operators=["rms"])} == {"rms"}
    assert {t.case.name for t in expand([s], tags=["short"], operators=["demo.a*"])} == {"add"}
    got = expand([s], tags=["short"], test_name=["M=4"])
    assert got and all("M=4" in t.id for t in got)


def _error(text, tmp_path, name="broken.yaml"):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(SuiteError) as ei:
        load_suite(str(p))
    return str(p), ei.value


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    text = GOOD.replace("    dtypes: [float32, float16]\n",
                        "    dtypes: [float32, float16\n", 1)   # unclosed bracket, line 7
    path, err = _error(text, tmp_path)
    assert err.path == path and err.line is not None and 7 <= err.line <= 9
    assert str(err).startswith(f"{path}:{err.line}: YAML syntax error")


def test_bad_indentation_names_line(tmp_path):
    text = "cases:\n  - name: a\n    op: torch.neg\n   inputs: []\n"
    path, err = _error(text, tmp_path)
    assert str(err).startswith(f"{path}:") and err.line in (3, 4)


@pytest.mark.parametrize("old,new,line,needle", [
    ("    backward: true\n", "    backwards: true\n", 8, "unknown key 'backwards'"),
    ("dtypes: [float32, float16]", "dtypes: [float32, float17]", 7, "unknown dtype 'float17'"),
    ("{name: b, shape: [N]}", "{name: b, shape: [N], sahpe: 1}", 6, "unknown input key 'sahpe'"),
    ("      - {tags: [short], cross: {M: [2, 4], N: [8]}}\n",
     "      - {tags: [short], cross: {M: [2, 4]}}\n", 12, "uses N"),
    ("flops: M*N", "flops: M*(N", 9, "invalid expression"),
    ("    op: torch.add\n", "", 4, "exactly one of 'op' or 'expr'"),
    ("  - name: rms\n", "  - name: add\n", 14, "case name 'add' repeats"),
    ("list: [{M: 64, N: 64}]", "list: [{M: 64, N: 64}], cross: {M: [1]}", 13, "exactly one of 'cross'"),
])
def test_schema_errors_name_file_and_line(tmp_path, old, new, line, needle):
    assert old in GOOD
    path, err = _error(GOOD.replace(old, new, 1), tmp_path)
    assert (err.path, err.line) == (path, line), str(err)
    assert needle in str(err)
    assert str(err).startswith(f"{path}:{line}: ")


def test_not_a_mapping(tmp_path):
    path, err = _error("- just\n- a list\n", tmp_path)
    assert err.line == 1 and "mapping" in str(err)


def test_builtin_suites_all_load_and_have_short_tests():
    suites = config.load_suites()
    names = {s.name for s in suites}
    required = {"activation", "binary", "bmm", "conv", "gather", "indexing", "linear",
                "logsumexp", "matmul", "norm", "rmsnorm", "shape", "softmax", "unary",
                "embedding", "reduction", "attention"}
    assert required <= names
    for s in suites:
        assert expand([s], tags=["short"]), f"suite {s.name} has no short tests"
        assert expand([s], tags=["long"]), f"suite {s.name} has no long tests"
        for c in s.cases:
            for f in (c.flops, c.bytes):
                if f:
                    compile(f, "f", "eval")
    # the suites ship as package data next to the code
    assert all(os.path.dirname(s.path) == config.SUITE_DIR for s in suites)


def test_cli_reports_broken_suite(tmp_path, capsys):
    from torch_musa.op_benchmark.cli import main
    p = tmp_path / "bad.yaml"
    p.write_text("cases:\n  - name: x\n    op: torch.neg\n    inputs: [{name: a}]\n")
    assert main(["--suite", str(p), "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{p}:4:" in err and "has no 'shape'" in err

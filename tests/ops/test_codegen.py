"""The registry codegen: the shipped yaml is valid; broken entries are named."""
import textwrap

import pytest

from torch_musa.ops import codegen


@pytest.fixture(scope="module")
def native():
    return codegen.load_native()


def registry(tmp_path, text):
    p = tmp_path / "musa_functions.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_shipped_registry_is_valid_and_has_every_strategy(native):
    entries = codegen.parse_registry(native=native)
    strategies = {e.strategy for e in entries}
    assert strategies == {"Legacy", "LegacyMeta", "Customized"}
    names = {e.name for e in entries}
    assert {"add.Tensor", "add_.Tensor", "add.out", "mm", "native_layer_norm", "musa::rms_norm"} <= names
    atan2 = {e.name: e.strategy for e in entries if e.name.startswith("atan2")}
    assert atan2 == {"atan2.out": "LegacyMeta", "atan2": "LegacyMeta", "atan2_": "LegacyMeta"}


def test_generated_code_registers_each_entry(native):
    entries = codegen.parse_registry(native=native)
    cpp = "".join(codegen.generate_cpp(entries).values())
    assert 'm.impl("add.Tensor", TORCH_FN((UnboxedKernel<at::_ops::add_Tensor' in cpp
    assert "MetaThenOut<at::_ops::atan2, at::_ops::atan2_out" in cpp
    assert "InPlaceViaOut<at::_ops::atan2_, at::_ops::atan2_out" in cpp
    assert cpp.count("m.impl(") == sum(e.namespace == "aten" for e in entries)
    py = codegen.generate_python(entries)
    assert "torch_musa.ops.custom:rms_norm" in py


def test_dry_run_writes_nothing(tmp_path, capsys):
    assert codegen.main(["--dry-run", "--out-dir", str(tmp_path / "gen"), "--py-out", str(tmp_path / "g.py")]) == 0
    out = capsys.readouterr().out
    assert "would write" in out and "musa_registrations_0.cpp" in out
    assert not (tmp_path / "gen").exists() and not (tmp_path / "g.py").exists()


@pytest.mark.parametrize("text,message", [
    ("- func: not_an_op(Tensor self) -> Tensor\n", ":1: aten::not_an_op is not an operator"),
    ("- func: add.Tensor(Tensor self, Tensor other) -> Tensor\n", ":1: schema of add.Tensor differs"),
    ("- func: relu(Tensor self -> Tensor\n", ":1: bad schema"),
    ("- func: relu(Tensor self) -> Tensor\n  dispatch:\n    CUDA: relu\n", ":1: dispatch may only name the PrivateUse1"),
    ("- func: relu(Tensor self) -> Tensor\n  colour: red\n", ":1: unknown key(s) ['colour']"),
    ("- func: relu(Tensor self) -> Tensor\n- func: relu(Tensor self) -> Tensor\n", ":2: relu is declared twice"),
    ("- func: atan2(Tensor self, Tensor other) -> Tensor\n  structured_delegate: atan2.out\n",
     ":1: atan2 delegates to atan2.out, which this registry does not declare as structured"),
    ("- func: relu(Tensor self) -> Tensor\n  structured: True\n", ":1: relu is marked structured but PyTorch's is not"),
    ("- func: musa::my_op(Tensor x) -> Tensor\n", ":1: musa::my_op is a new operator and needs a Customized kernel"),
    ("- dispatch: {}\n", ":1: every entry needs a 'func:' schema"),
])
def test_broken_entries_are_rejected_with_file_and_line(tmp_path, native, text, message):
    path = registry(tmp_path, text)
    with pytest.raises(codegen.RegistryError) as info:
        codegen.parse_registry(path, native=native)
    assert str(path) in str(info.value) and message in str(info.value)


def test_cli_reports_errors_with_exit_code(tmp_path, capsys):
    path = registry(tmp_path, "- func: not_an_op(Tensor self) -> Tensor\n")
    assert codegen.main(["--registry", str(path), "--dry-run"]) == 1
    assert "not an operator" in capsys.readouterr().err

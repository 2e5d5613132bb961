"""musa_functions.yaml lists every kernel musa serves, and the device serves exactly those.

The codegen's entries and the hand-written lines (C++ kernels, Python kernels that
ops/kernels.py installs, subsystems' kernels) together must equal what the dispatcher
holds for musa's keys; coverage() and the README's count come from the same list.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

import torch_musa
from torch_musa.config import CONFIG
from torch_musa.ops import _generated, codegen, kernels

ROOT = Path(__file__).resolve().parents[2]
MUSA_KEYS = ("PrivateUse1", "AutogradPrivateUse1", "NestedTensorPrivateUse1", "QuantizedPrivateUse1")


def _route(op: str, key: str, line: str) -> bool:
    """A route to a boxed fallback, not a kernel: ops/fallback_routes.py's (registered by
    csrc/aten/fallback.cpp), and nested_fallback.cpp's for every op with a NestedTensorCPU kernel."""
    if "csrc/aten/fallback.cpp" in line:
        return True
    return (key == "NestedTensorPrivateUse1" and "nested_fallback.cpp" in line and op != "aten::_to_copy"
            and torch._C._dispatch_has_kernel_for_dispatch_key(op, "NestedTensorCPU"))


def _registered() -> set[tuple[str, str]]:
    """(op, key) of every aten/musa/quantized kernel torch_musa registered for a musa key (routes aside)."""
    out = set()
    for key in MUSA_KEYS:
        for op in torch._C._dispatch_get_registrations_for_dispatch_key(key):
            if not op.startswith(("aten::", "musa::", "quantized::")):
                continue
            line = next(ln for ln in torch._C._dispatch_dump(op).splitlines() if ln.startswith(key + ":"))
            ours = "torch_musa/" in line or "musa_registrations_" in line  # not PyTorch's own
            if ours and not _route(op, key, line):
                out.add((op, key))
    return out


def _declared(driver: str) -> set[tuple[str, str]]:
    out = {(f"aten::{name}", "PrivateUse1") for name in _generated.NATIVE_ATEN}
    out |= {(f"{ns}::{schema.split('(')[0]}", "PrivateUse1") for ns, schema, _, _ in _generated.CUSTOMIZED}
    out |= {(k.qualified, key) for k in kernels.hand_written() if k.applies(driver) for key in k.keys}
    return out


def test_the_dispatcher_holds_exactly_the_declared_kernels():
    registered, declared = _registered(), _declared(CONFIG.driver)
    assert not registered - declared, f"kernels musa_functions.yaml does not list: {sorted(registered - declared)}"
    assert not declared - registered, f"listed but not registered: {sorted(declared - registered)}"


def test_coverage_counts_every_source():
    cov = torch_musa.ops.coverage()
    strategies = set(cov["strategy"].values())
    assert {"Legacy", "Customized", "Native", "Python"} <= strategies
    ops = ["aten::add.Tensor", "musa::rms_norm", "aten::empty_strided", "aten::_thnn_fused_lstm_cell",
           "aten::scaled_dot_product_attention", "aten::histc"]
    for op in ops:
        assert op in cov["native"], op
    assert cov["native"] == list(kernels.served())


def test_every_python_kernel_resolves():
    for k in kernels.hand_written():
        if k.strategy == "Python":
            assert callable(k.make()), k


def test_kernel_modules_neither_register_nor_check_the_driver():
    """One installer (ops/kernels.py) and the yaml's ``drivers:`` decide; the modules that
    hold Python kernels only define them."""
    modules = {k.kernel.split(":")[1] for k in kernels.hand_written() if k.strategy == "Python"}
    assert len(modules) == 5
    for module in modules:
        text = (ROOT / (module.replace(".", "/") + ".py")).read_text()
        for pattern in ("torch.library.Library(", ".impl(", "CONFIG.driver", "def install("):
            assert pattern not in text, f"{module}: {pattern}"


def test_codegen_skips_the_hand_written_lines():
    entries = codegen.parse_registry()
    names = {e.name for e in entries}
    assert len(entries) == len(_generated.NATIVE_ATEN) + len(_generated.CUSTOMIZED)
    assert "batch_norm_stats" not in names and "empty_strided" not in names


def test_readme_states_the_host_drivers_count():
    m = re.search(r"\| operators \| (\d+) native,", (ROOT / "README.md").read_text())
    assert m, "README.md's operators row should say how many ops are native"
    assert int(m.group(1)) == len(kernels.served("host"))

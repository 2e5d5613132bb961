"""The pure parts of benchmarks/device_suites.py: id pairing, sampling, classes, known reasons.

The runner itself needs PyTorch's test/ folder (not in the wheel); see docs/DEVICE_SUITES.md.
"""
import re
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ds():
    return load_benchmark("device_suites")


def test_ids_pair_across_devices(ds):
    cpu = "test_ops.py::TestCommonCPU::test_out__refs_add_cpu_float32"
    musa = "test_ops.py::TestCommonMUSA::test_out__refs_add_musa_float32"
    assert ds.normalize(cpu, "cpu") == ds.normalize(musa, "musa") == \
        "test_ops.py::TestCommonDEV::test_out__refs_add_DEV_float32"
    # Only the last device suffix is the device: an op name may contain "_cpu".
    assert ds.normalize("t.py::TCPU::test_x_cpu_y_cpu", "cpu") == "t.py::TDEV::test_x_cpu_y_DEV"
    assert ds.normalize("t.py::TestViewOpsMUSA::test_view_musa", "musa") == "t.py::TestViewOpsDEV::test_view_DEV"


def test_sample_is_deterministic_and_seeded(ds):
    keys = [f"k{i}" for i in range(100)]
    a = sorted(keys, key=lambda k: ds.sample_key(k, "0"))[:10]
    assert a == sorted(keys, key=lambda k: ds.sample_key(k, "0"))[:10]
    assert a != sorted(keys, key=lambda k: ds.sample_key(k, "1"))[:10]


@pytest.mark.parametrize("outcome,message,cls", [
    ("failed", "AssertionError: Tensor-likes are not close!", "wrong value"),
    ("failed", "NotImplementedError: Could not run 'aten::foo' with arguments from the 'PrivateUse1' backend",
     "missing kernel"),
    ("failed", "AssertionError: RuntimeError not raised", "wrong error type/text"),
    ("failed", 'AssertionError: "expected size" does not match "other text"', "wrong error type/text"),
    ("skipped", "Only runs on cpu", "device-specific decorator/skip"),
    ("failed", "Failed: Timeout >120.0s", "hang/timeout"),
    ("crash", "process died (exit -11) in this test", "crash"),
    ("failed", "RuntimeError: something else", "other error"),
])
def test_classes(ds, outcome, message, cls):
    assert ds.classify({"outcome": "passed"}, {"outcome": outcome, "message": message}) == cls


def test_known_reasons_file_parses_and_matches(ds):
    reasons = ds.load_known(ROOT / "benchmarks" / "device_suites_xfail.yaml")
    assert reasons and all(r["why"] for r in reasons)
    assert ds.match_known("x.py::TDEV::test_a_DEV", "Only runs on cpu", reasons) == "test_restricted_to_native_devices"
    assert ds.match_known("x.py::TDEV::test_a_DEV", "AssertionError: nothing known", reasons) is None
    for r in reasons:
        for p in r["ids"] + r["messages"]:
            assert isinstance(p, re.Pattern)

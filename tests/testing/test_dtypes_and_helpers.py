"""Profile-aware dtype lists, dtype errors, decorators, gen_ip_port, CompileCounter,
and the float32 reference for half-precision ops the CPU cannot compute."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from torch_musa import testing
from torch_musa.config import CONFIG
from torch_musa.ops import registry
from torch_musa.testing import OpTest, UnsupportedDtypeError

PROFILE = CONFIG.profile


def test_arch_and_lists_follow_the_profile():
    assert testing.get_musa_arch() == PROFILE.arch
    assert testing.get_musa_arch() == 10 * torch.musa.get_device_capability()[0] + \
        torch.musa.get_device_capability()[1]
    for dtypes in (testing.get_profile_support_types(),
                   testing.get_profile_support_types_withfp16(), testing.get_all_types(),
                   testing.get_float_types()):
        assert not set(dtypes) & set(PROFILE.unsupported_dtypes())
    assert torch.float16 in testing.get_profile_support_types_withfp16()
    assert (torch.float64 in testing.get_profile_support_types()) == PROFILE.supports_fp64
    assert (torch.bfloat16 in testing.get_profile_support_types_withfp16()) == \
        PROFILE.supports_bf16
    assert (torch.bfloat16 in testing.get_float_types()) == PROFILE.supports_bf16


_PROBE = """
import json, torch, torch_musa
from torch_musa import testing as T
res = {"arch": T.get_musa_arch(), "all": [str(d) for d in T.get_profile_support_types()],
       "float": [str(d) for d in T.get_float_types()],
       "types": [str(d) for d in T.get_all_types()]}
x = torch.randn(4)
for name, dt in (("f64", torch.float64), ("bf16", torch.bfloat16)):
    try:
        T.OpTest(func=torch.exp, input_args={"input": x}, test_dtype=dt).check_result()
        res[name] = "ok"
    except T.UnsupportedDtypeError as e:
        res[name] = str(e)
try:
    T.OpTest(func=torch.exp, input_args={"input": x}).check_musabf16_vs_musafp32()
    res["bf16_vs_fp32"] = "ok"
except T.UnsupportedDtypeError as e:
    res["bf16_vs_fp32"] = str(e)
print(json.dumps(res))
"""


def test_support_type_lists_are_upstreams_fixed_lists():
    """The real torch_musa's lists, the same on every profile: its tests build a
    ``value`` scalar from each non-float32 entry (addcmul), so float64 must not be there."""
    assert testing.get_all_support_types() == [torch.float32, torch.int32, torch.int64]
    assert testing.get_all_support_types_withfp16() == [
        torch.float16, torch.float32, torch.int32, torch.int64]
    assert testing.get_all_support_types_withfp() == testing.get_all_support_types_withfp16()


def test_addcmul_written_against_the_fixed_list():
    """The pattern of upstream's addcmul tests: float32 gets a float ``value``, every
    other entry is an integer dtype, whose ``value`` is an int."""
    for dtype in testing.get_all_support_types():
        value = 0.5 if dtype == torch.float32 else 2
        a, b, c = (torch.randint(-3, 3, (4, 5)).to(dtype) for _ in range(3))
        OpTest(func=torch.addcmul, input_args={"input": a, "tensor1": b, "tensor2": c,
                                               "value": value}).check_result()


@pytest.mark.slow
@pytest.mark.requires_host_driver("the MTT cards' profile dtype tables, which only the host driver models")
def test_other_profiles():
    """s80 (arch 21: no bf16, no fp64) and s5000 (arch 31: both), in fresh interpreters
    started together (the profile is read at import)."""
    expected = {"s80": (21, False, False), "s5000": (31, True, True)}
    procs = {p: subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "TORCH_MUSA_PROFILE": p})
             for p in expected}
    for profile, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        arch, fp64, bf16 = expected[profile]
        res = json.loads(out.strip().splitlines()[-1])
        assert res["arch"] == arch
        assert ("torch.float64" in res["all"]) == fp64
        assert ("torch.float64" in res["types"]) == fp64
        assert ("torch.bfloat16" in res["float"]) == bf16
        assert (res["f64"] == "ok") == fp64
        assert (res["bf16"] == "ok") == bf16 and (res["bf16_vs_fp32"] == "ok") == bf16
        if not bf16:
            assert "bfloat16" in res["bf16"] and "MTT S80" in res["bf16"], res["bf16"]
            assert "float64" in res["f64"] and "TORCH_MUSA_PROFILE=s4000 or s5000" in res["f64"]


@pytest.mark.requires_profile("s80", reason="a profile without float64")
def test_explicit_float64_is_a_clear_error():
    x = torch.randn(3)
    with pytest.raises(UnsupportedDtypeError, match=r"float64.*MTT S80"):
        OpTest(func=torch.exp, input_args={"input": x}, test_dtype=torch.float64).check_result()
    # float64 inputs without test_dtype: the device's error, with the op named
    with pytest.raises(UnsupportedDtypeError, match=r"OpTest for op torch.exp.*hardware profile"):
        OpTest(func=torch.exp, input_args={"input": x.double()}).check_result()
    with pytest.raises(UnsupportedDtypeError):
        testing.require_dtype(torch.float64)
    assert not testing.dtype_supported(torch.float64) and testing.dtype_supported(torch.float32)


def test_half_reference_falls_back_to_float32_where_cpu_cannot():
    """An op whose CPU kernel lacks float16/bfloat16: the reference is computed in
    float32 from the same rounded inputs and compared at half-precision tolerance."""
    seen = []

    def cpu_lacks_half(input):
        seen.append((input.device.type, input.dtype))
        if input.device.type == "cpu" and input.dtype in (torch.float16, torch.bfloat16):
            raise NotImplementedError(f'"my_op_cpu" not implemented for \'{input.dtype}\'')
        return torch.erf(input) * 3

    for dtype in testing.get_float_types():
        if dtype == torch.float32:
            continue
        seen.clear()
        OpTest(func=cpu_lacks_half, input_args={"input": torch.randn(64)},
               test_dtype=dtype).check_result()
        assert ("cpu", torch.float32) in seen and ("musa", dtype) in seen
    # a real error that is not about half precision is not hidden
    with pytest.raises(ValueError):
        OpTest(func=lambda input: (_ for _ in ()).throw(ValueError("boom")),
               input_args={"input": torch.randn(2)}, test_dtype=torch.float16).check_result()


def test_nonzero_card_decorator_runs_on_card_n_then_current():
    devices = []

    @testing.test_on_nonzero_card_if_multiple_musa_device(1)
    def body():
        devices.append(torch.musa.current_device())

    body()
    if torch.musa.device_count() > 1:
        assert devices == [1, 0]
    else:
        assert devices == [0]
    assert torch.musa.current_device() == 0

    devices.clear()

    @testing.test_on_nonzero_card_if_multiple_musa_device(7)  # more than exist: current only
    def body7():
        devices.append(torch.musa.current_device())

    body7()
    assert devices == [0]


def test_availability_flags_and_marks():
    assert testing.MUSA_AVAILABLE is torch.musa.is_available()
    assert testing.MULTIGPU_AVAILABLE == (torch.musa.device_count() >= 2)
    assert testing.skip_if_musa_unavailable.name == "skipif"
    assert testing.skip_if_not_multiple_musa_device.name == "skipif"


@testing.skip_if_not_multiple_musa_device
def test_skip_mark_applies():
    assert torch.musa.device_count() >= 2


def test_gen_ip_port_gives_a_bindable_address():
    host, port = testing.gen_ip_port()
    assert isinstance(host, str) and isinstance(port, str)
    with socket.socket() as s:
        s.bind((host, int(port)))


def test_compile_counter_on_musa():
    cnt = testing.CompileCounter()

    def f(x):
        return torch.relu(x) * 2 + 1

    g = torch.compile(f, backend=cnt)
    x = torch.randn(8, device="musa")
    out = g(x)
    assert out.device.type == "musa"
    testing.assert_close(out, f(x))
    g(torch.randn(8, device="musa"))
    assert cnt.frame_count == 1 and cnt.op_count == 3
    cnt.clear()
    assert cnt.frame_count == 0 and cnt.op_count == 0


@pytest.mark.requires_profile("s80", reason="double casting is for cards without float64")
def test_float64_under_double_cast_uses_float32_tolerance():
    x, w = torch.randn(8, 32), torch.randn(32, 4)
    registry.set_double_cast(True)
    try:
        assert testing.double_cast_active()
        testing.require_dtype(torch.float64)
        t = OpTest(func=torch.matmul, input_args={"input": x, "other": w},
                   test_dtype=torch.float64)
        t.check_result()
        t.check_grad_fn()
        # still strict enough to catch a wrong result
        bad = OpTest(func=lambda input: torch.exp(input) * (1 + 1e-4 * (input.device.type ==
                                                                         "musa")),
                     input_args={"input": x}, test_dtype=torch.float64)
        with pytest.raises(AssertionError, match="dtype float64"):
            bad.check_result()
    finally:
        registry.set_double_cast(None)  # back to following TORCH_USE_MUSA_DOUBLE_CAST
    assert not testing.double_cast_active()

"""The correctness gate: a planted wrong musa kernel shows as wrong, never as a timing."""
import torch

from torch_musa.op_benchmark.config import expand, parse_suite
from torch_musa.op_benchmark.runner import compare, run_test
from torch_musa.op_benchmark.report import results_table


def _off_by_a_bit(t):
    return (-(t.cpu()) + 1e-2).to(t.device)


SUITE = """
cases:
  - name: neg
    op: torch.neg
    inputs: [{name: x, shape: [N]}]
    configs: [{tags: [short], cross: {N: [64]}}]
  - name: relu
    op: torch.relu
    backward: true
    inputs: [{name: x, shape: [N]}]
    configs: [{tags: [short], cross: {N: [64]}}]
"""


def _tests(name, mode=None):
    ts = expand([parse_suite(SUITE, "gate.yaml")], operators=[name])
    return [t for t in ts if mode is None or t.mode == mode]


def test_compare_tolerances():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert compare(a, a + 1e-6)[0]
    assert not compare(a, a + 1e-2)[0]
    h = a.half()
    assert compare(h, h + 1e-3)[0]                     # float16 is looser
    assert not compare(torch.tensor([1, 2]), torch.tensor([1, 3]))[0]
    assert not compare(a, a[:2])[0]
    assert not compare(a, torch.tensor([1.0, float("nan"), 3.0]))[0]


def test_planted_wrong_kernel_is_reported_wrong(planted, fast):
    planted("neg", _off_by_a_bit)
    (t,) = _tests("neg")
    cpu, mus = run_test(t, [torch.device("cpu"), torch.device("musa")], fast)
    assert cpu["status"] == "ok" and cpu["median_s"] > 0
    assert mus["status"] == "wrong" and mus["checked"]
    assert "median_s" not in mus                   # never timed as a success
    assert "max abs err" in mus["error"] and "float64" in mus["error"]
    table = results_table([cpu, mus], ["cpu", "musa"])
    assert "WRONG" in table and "musa: wrong" in table


def test_wrong_first_device_is_caught_too(planted, fast):
    planted("neg", _off_by_a_bit)
    (t,) = _tests("neg")
    mus, cpu = run_test(t, [torch.device("musa"), torch.device("cpu")], fast)
    # the float64 arbiter finds the first device (musa) is the one that is off
    assert mus["status"] == "wrong" and "disagrees with cpu" in mus["error"]
    assert "median_s" not in mus
    assert cpu["status"] == "ok" and "first device is wrong" in cpu["check_note"]


def test_wrong_backward_kernel_only_fails_fwd_bwd(planted, fast):
    def bad_threshold_backward(grad, self, threshold):
        return (grad.cpu() * 2 * (self.cpu() > threshold)).to(grad.device)
    planted("threshold_backward", bad_threshold_backward)
    fwd, bwd = _tests("relu", "fwd"), _tests("relu", "fwd+bwd")
    devs = [torch.device("cpu"), torch.device("musa")]
    assert [r["status"] for r in run_test(fwd[0], devs, fast)] == ["ok", "ok"]
    rows = run_test(bwd[0], devs, fast)
    assert [r["status"] for r in rows] == ["ok", "wrong"]
    assert rows[1]["error"].startswith("output 1")     # the gradient, not the forward output


def test_failing_kernel_is_an_error_row(planted, fast):
    def broken(t):
        raise RuntimeError("musa kernel exploded")
    planted("neg", broken)
    (t,) = _tests("neg")
    cpu, mus = run_test(t, [torch.device("cpu"), torch.device("musa")], fast)
    assert cpu["status"] == "ok"
    assert mus["status"] == "error" and "exploded" in mus["error"]


def test_custom_op_with_wrong_musa_kernel(musa, fast):
    lib = torch.library.Library("musa_bench_test", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        lib.impl("twice", lambda x: (x.cpu() * 2.001).to(x.device), "PrivateUse1")
        suite = parse_suite("""
cases:
  - name: twice
    op: torch.ops.musa_bench_test.twice.default
    inputs: [{name: x, shape: [N, N]}]
    configs: [{tags: [short], cross: {N: [16]}}]
""", "custom.yaml")
        (t,) = expand([suite])
        cpu, mus = run_test(t, [torch.device("cpu"), musa], fast)
        assert (cpu["status"], mus["status"]) == ("ok", "wrong")
    finally:
        lib._destroy()


def test_correct_device_passes_and_restored_kernel_is_right(musa, fast):
    # after the planted kernels are gone, musa agrees with cpu again
    (t,) = _tests("neg")
    rows = run_test(t, [torch.device("cpu"), musa], fast)
    assert [r["status"] for r in rows] == ["ok", "ok"] and rows[1]["checked"]

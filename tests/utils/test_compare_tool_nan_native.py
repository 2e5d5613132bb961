"""NanInfTracker's native path: the C++ check on musa's op path (csrc/utils/nan_check.cpp)."""
import warnings

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa import _C
from torch_musa.ops import op_debug
from torch_musa.utils.compare_tool import NanInfTracker, open_module_tracker

DEV = "musa"
# The native tracker is the host driver's C++ check on musa's op path; under the cuda driver
# backend="native" raises a ValueError saying so (the scan itself works there: test_scan_*).
NATIVE_TRACKER = pytest.mark.requires_host_driver("the native tracker is host-driver only")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.complex64])
def test_scan_tells_finite_inf_and_nan(dtype):
    for n in (1, 7, 1000, 300_000):
        x = torch.randn(n, dtype=dtype) * 1000
        assert _C._nan_check_scan(x) == 0
        for where in (0, n // 2, n - 1):
            y = x.clone()
            y[where] = float("inf") if not dtype.is_complex else complex(0, float("-inf"))
            assert _C._nan_check_scan(y) == 1, (n, where)
            y[(where + 1) % n] = float("nan")
            assert _C._nan_check_scan(y) == 2, (n, where)
    # largest finite values are finite; views and musa tensors read the right bytes
    big = torch.tensor([torch.finfo(dtype if not dtype.is_complex else torch.float32).max], dtype=dtype)
    assert _C._nan_check_scan(big) == 0
    m = torch.zeros(4, 6, dtype=dtype)
    m[3, 0] = float("nan")
    assert _C._nan_check_scan(m.t()) == 2            # dense, not contiguous
    assert _C._nan_check_scan(m[:3, ::2]) == 0       # strided view: the NaN is outside it
    assert _C._nan_check_scan(m.to(DEV)[3]) == 2


def test_scan_of_a_large_tensor_in_parallel():
    n = (1 << 24) + 3                                # above the one-thread limit
    x = torch.zeros(n)
    assert _C._nan_check_scan(x) == 0
    x[n - 2] = float("-inf")
    assert _C._nan_check_scan(x) == 1
    x[1] = float("nan")
    assert _C._nan_check_scan(x) == 2


def _planted(shift):
    class Stage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.log(self.proj(x) - shift)

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), Stage(), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to(DEV)
    return m


def _train(m, t, steps=1):
    opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(4, 8, device=DEV)
    for _ in range(steps):
        opt.zero_grad()
        m(x).mean().backward()
        opt.step()
        t.step()


@NATIVE_TRACKER
def test_auto_picks_the_native_path_on_musa_and_no_dispatch_mode():
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    with NanInfTracker() as t:
        assert t._native and _C._nan_check_armed()
        assert _get_current_dispatch_mode() is None      # no Python per op
    assert not _C._nan_check_armed()
    with NanInfTracker(backend="python") as t:
        assert not t._native and _get_current_dispatch_mode() is t
    with NanInfTracker(check_every=1) as t:          # synchronous per-op reads: dispatch mode
        assert not t._native


@NATIVE_TRACKER
def test_native_flags_the_producing_op_with_module_and_line():
    m = _planted(shift=100.0)
    h = open_module_tracker(m)
    try:
        with NanInfTracker(backend="native") as t:
            _train(m, t)
    finally:
        h.remove()
    assert [(e["op"], e["kind"], e["what"], e["module"]) for e in t.events] == [
        ("aten.log.default", "origin", "NaN", "model.1")]
    assert "torch.log(self.proj(x) - shift)" in t.events[0]["code"]
    assert t.first_offender == {"op": "aten.log.default", "seq": t.events[0]["seq"], "step": 0,
                                "kind": "origin"}
    # tanh, the head, the loss, backward and the (foreach) optimizer only carried it
    assert t.counts["downstream"] >= 8 and t.counts["entered"] == 0


@NATIVE_TRACKER
def test_native_quiet_when_finite_and_counts_every_op():
    m = _planted(shift=-100.0)
    with NanInfTracker(backend="native") as t:
        _train(m, t, steps=2)
    c = t.counts
    assert not t.events and c["origin"] == c["entered"] == c["downstream"] == c["explicit"] == 0
    assert c["checked"] > 30 and c["checks"] == 2 and t.first_offender is None


@NATIVE_TRACKER
def test_off_records_nothing():
    x = -torch.rand(5, device=DEV) - 1
    _C._nan_check_take(0, -1)                        # drain whatever an earlier test left
    torch.log(x)                                     # no tracker: not armed, not counted
    with NanInfTracker(enabled=False) as t:
        torch.log(x)
    with NanInfTracker(backend="native", start_step=1) as t:
        assert not _C._nan_check_armed()             # outside the window: not armed
        torch.log(x)
        t.step()
        assert _C._nan_check_armed()
        torch.log(x)
    assert [e["step"] for e in t.events] == [1] and t.counts["origin"] == 1
    assert not _C._nan_check_armed()
    torch.log(x)
    d = _C._nan_check_take(0, -1)
    assert d["checked"] == d["origin"] == d["seen"] == 0


@NATIVE_TRACKER
def test_native_backward_op_and_grad_fn():
    m = torch.nn.Linear(4, 4).to(DEV)
    h = open_module_tracker(m, root_name="net")
    try:
        with NanInfTracker(backend="native") as t:
            y = torch.sqrt(torch.relu(m(torch.zeros(2, 4, device=DEV)) * 0))
            y.sum().backward()
            t.step()
    finally:
        h.remove()
    e = t.events[0]
    assert (e["phase"], e["grad_fn"], e["kind"], e["what"]) == ("backward", "SqrtBackward0", "origin", "Inf")


@NATIVE_TRACKER
def test_native_sees_ops_returning_nothing_and_the_conv_kernel():
    params = [torch.ones(3, device=DEV), torch.ones(3, device=DEV)]
    grads = [torch.zeros(3, device=DEV), torch.full((3,), 1e10, device=DEV)]
    with NanInfTracker(backend="native") as t:          # -> (): the written lists are checked
        torch._fused_sgd_(params, grads, [], weight_decay=0.0, momentum=0.0, lr=1e30,
                          dampening=0.0, nesterov=False, maximize=False, is_first_step=True)
    assert [(e["op"], e["what"], e["flags"]) for e in t.events] == [("aten._fused_sgd_.default", "Inf", [1])]
    conv = torch.nn.Conv2d(1, 2, 3).to(DEV)
    with torch.no_grad():
        conv.weight[0, 0, 0, 0] = float("inf")
    with NanInfTracker(backend="native") as t:
        conv(torch.ones(1, 1, 5, 5, device=DEV))
    assert [(e["op"], e["kind"]) for e in t.events] == [("aten.convolution_overrideable.default", "entered")]
    with torch.no_grad():
        conv.weight.fill_(1e30)
    with NanInfTracker(backend="native") as t:
        conv(torch.full((1, 1, 5, 5), 1e30, device=DEV))     # overflow: made by the conv
    assert [(e["op"], e["kind"]) for e in t.events] == [("aten.convolution_overrideable.default", "origin")]


@NATIVE_TRACKER
def test_inplace_on_a_carrier_is_downstream_and_overwritten_input_is_not_blamed():
    x = -torch.rand(4, device=DEV) - 1
    with NanInfTracker(backend="native") as t:
        y = x * 1
        y.log_()                          # origin: in place, its input overwritten
        y.mul_(2)                         # carries it
    assert [(e["op"], e["kind"]) for e in t.events] == [("aten.log_.default", "origin")]
    assert t.counts["downstream"] == 1


@NATIVE_TRACKER
def test_native_and_op_debug_logging_together(tmp_path):
    op_debug.enable(1, out_dir=tmp_path, allow=["log"])
    try:
        with NanInfTracker(backend="native") as t:
            torch.log(-torch.ones(3, device=DEV))
    finally:
        op_debug.disable()
    assert [e["op"] for e in t.events] == ["aten.log.default"]
    assert "aten::log" in (tmp_path / "full_log.txt").read_text()
    with NanInfTracker(backend="native") as t:        # and after the logger is gone
        torch.log(-torch.ones(3, device=DEV))
    assert len(t.events) == 1


@NATIVE_TRACKER
def test_a_step_without_musa_ops_switches_to_the_dispatch_mode():
    x = torch.ones(3)
    with NanInfTracker(backend="native") as t:
        with pytest.warns(UserWarning, match="no musa op ran"):
            (x * 2).sum()
            t.step()
        assert not t._native
        torch.log(-x)
    assert [(e["op"], e["kind"]) for e in t.events] == [("aten.log.default", "origin")]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with NanInfTracker(backend="native") as t:    # musa work: stays native
            torch.ones(3, device=DEV) * 2
            t.step()
        assert t._native and not [x for x in w if "no musa op ran" in str(x.message)]

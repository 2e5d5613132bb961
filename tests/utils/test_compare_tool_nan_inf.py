"""NanInfTracker: NaN/Inf traced to the op and module that produced it, not its carriers."""
import json
import os

import pytest
import torch

import torch_musa  # noqa: F401
from torch_musa.utils.compare_tool import (NanInfTrackError, NanInfTracker,
                                           nan_inf_track_for_single_op, open_module_tracker)

DEV = "musa"


@pytest.fixture(autouse=True, params=["python", pytest.param("native", marks=pytest.mark.requires_host_driver(
    "the native op-path check is the host driver's; under the cuda driver backend='native' raises a "
    "ValueError saying so"))])
def backend(request, monkeypatch):
    """Every test runs on both paths: the dispatch mode and musa's C++ op-path check
    (dump_error_data needs the dispatch mode: there "auto" keeps it)."""
    init = NanInfTracker.__init__

    def patched(self, *a, **k):
        k.setdefault("backend", "auto" if k.get("dump_error_data") else request.param)
        init(self, *a, **k)

    monkeypatch.setattr(NanInfTracker, "__init__", patched)
    return request.param


class LogStage(torch.nn.Module):
    """A submodule that takes log of what may be negative: the planted NaN source."""

    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        h = self.proj(x)
        return torch.log(h - self.shift)             # NaN wherever h < shift


class Net(torch.nn.Module):
    def __init__(self, d=8, shift=-100.0):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.ReLU())
        self.stage = torch.nn.ModuleDict({"a": torch.nn.Linear(d, d), "b": LogStage(d)})
        self.stage["b"].shift = shift
        self.head = torch.nn.Linear(d, 1)

    def forward(self, x):
        x = self.stem(x)
        x = self.stage["a"](x)
        x = self.stage["b"](x)
        return self.head(torch.tanh(x))


def _net(shift):
    torch.manual_seed(0)
    m = Net(shift=shift).to(DEV)
    return m, open_module_tracker(m)


def _step(m, opt, tracker, x):
    opt.zero_grad()
    m(x).mean().backward()
    opt.step()
    tracker.step()


def _jsonl(t):
    with open(t.jsonl_path) as f:
        return [json.loads(line) for line in f]


def test_clean_training_no_reports_one_read_per_step(tmp_path):
    m, h = _net(shift=-100.0)               # log of positive numbers: finite
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x = torch.randn(4, 8, device=DEV)
    try:
        with NanInfTracker(output_dir=str(tmp_path)) as t:
            for _ in range(3):
                _step(m, opt, t, x)
    finally:
        h.remove()
    assert t.counts["checked"] > 40
    assert t.counts["checks"] == 3          # flags read once per step, not once per op
    assert t.counts["origin"] == t.counts["downstream"] == 0
    assert not t._recs and not t._pending and not t._flag_parts    # emptied by each read


def test_planted_nan_traced_to_log_in_submodule(tmp_path, capsys):
    m, h = _net(shift=100.0)                # log(h - 100) < 0 everywhere: NaN
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x = torch.randn(4, 8, device=DEV)
    try:
        with NanInfTracker(output_dir=str(tmp_path)) as t:
            _step(m, opt, t, x)
    finally:
        h.remove()
    origins = [e for e in t.events if e["kind"] == "origin"]
    assert len(origins) == 1, t.events
    o = origins[0]
    assert o["op"] == "aten.log.default" and o["what"] == "NaN"
    assert o["module"] == "model.stage.b" and o["phase"] == "forward"
    assert "torch.log(h - self.shift)" in o["code"]
    assert o["verified"] and "finite" in o["verified"]
    # everything after it (tanh, head, loss, backward, the optimizer) only carried it
    assert t.counts["downstream"] >= 5 and t.counts["entered"] == 0
    down = [r for r in _jsonl(t) if r["kind"] == "downstream"]
    assert {r["op"] for r in down} >= {"aten.tanh.default", "aten.addmm.default"}
    out = capsys.readouterr().out
    assert "NaN first produced by aten.log.default" in out and "model.stage.b (forward)" in out


def test_inf_in_backward_named_with_grad_fn():
    m = torch.nn.Linear(4, 4).to(DEV)
    h = open_module_tracker(m, root_name="net")
    try:
        x = torch.zeros(2, 4, device=DEV)
        with NanInfTracker() as t:
            y = torch.sqrt(torch.relu(m(x) * 0))          # sqrt(0): finite; its gradient: inf
            y.sum().backward()
            t.step()
    finally:
        h.remove()
    o = t.events[0]
    assert o["phase"] == "backward" and o["grad_fn"] == "SqrtBackward0" and o["kind"] == "origin"
    assert o["what"] == "Inf"


def test_explicit_inf_mask_is_quiet_until_it_makes_nan():
    x = torch.randn(3, 5, device=DEV)
    causal = torch.ones(3, 5, device=DEV, dtype=torch.bool).triu(1)
    with NanInfTracker() as t:
        s = x.masked_fill(causal, float("-inf")).softmax(-1)      # the usual attention mask
        t.step()
    assert t.counts["explicit"] == 1 and not t.events
    with NanInfTracker() as t:
        full = torch.ones(3, 5, device=DEV, dtype=torch.bool)
        s = x.masked_fill(full, float("-inf")).softmax(-1)        # a fully masked row: NaN
        t.step()
    assert [e["op"] for e in t.events] == ["aten._softmax.default"]
    assert "Inf" in t.events[0]["verified"]
    del s


def test_nan_entering_through_a_parameter_is_named():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)).to(DEV)
    h = open_module_tracker(m)
    try:
        with torch.no_grad():
            m[1].weight[0, 0] = float("nan")
        with NanInfTracker() as t:
            m(torch.randn(2, 4, device=DEV))
            t.step()
    finally:
        h.remove()
    e = t.events[0]
    assert e["kind"] == "entered" and e["module"] == "model.1"
    assert any("parameter model.1.weight" in b for b in e["bad_inputs"])


def test_check_every_n_ops_and_window_and_ranks(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)             # should_log_to_file without output_dir: the cwd
    x = torch.randn(8, device=DEV)
    with NanInfTracker(check_every=4) as t:
        for _ in range(10):
            x = x * 1.0001
    assert t.counts["checked"] == 10 and t.counts["checks"] == 3          # 4 + 4 + 2 at exit
    # step window: only steps 1 and 2 are tracked
    with NanInfTracker(start_step=1, end_step=3) as t:
        for step in range(4):
            torch.log(-x.abs() - 1)
            t.step()
    assert t.counts["origin"] == 2 and {e["step"] for e in t.events} == {1, 2}
    monkeypatch.setenv("RANK", "3")
    with NanInfTracker(enable_ranks=[0, 1]) as t:
        torch.log(-x.abs() - 1)
    assert t.counts["checked"] == 0
    with NanInfTracker(enable_ranks=[3], should_log_to_file=True, output_dir=None) as t:
        pass
    assert (tmp_path / "nan_inf_report_rank3.txt").exists()
    with NanInfTracker(white_list=["aten.log"]) as t:
        torch.log(-x.abs() - 1).exp()
    assert [e["op"] for e in t.events] == ["aten.exp.default"]     # log unwatched: exp is first seen
    with NanInfTracker(target_list=["torch.ops.aten.exp"]) as t:
        torch.log(-x.abs() - 1).exp()
    assert t.counts["checked"] == 1


@pytest.mark.parametrize("backend", ["auto"])  # dump_error_data takes the dispatch mode: one run
def test_dump_and_replay_inplace(tmp_path, backend):
    x = -torch.rand(6, device=DEV) - 0.5
    with pytest.raises(NanInfTrackError, match="aten.log_.default"):
        with NanInfTracker(dump_error_data=True, output_dir=str(tmp_path)) as t:
            y = x * 2
            y.log_()                    # in place: the dump must hold y before the op
    path = tmp_path / "torch.ops.aten.log__inputs_rank0.pkl"
    assert path.exists()
    bad, args, kwargs, out = nan_inf_track_for_single_op(str(path))
    assert bad and args[0].device.type == "musa"
    torch.testing.assert_close(out.cpu().isnan(), torch.ones(6, dtype=torch.bool))
    bad, *_ = nan_inf_track_for_single_op(str(path), torch.ops.aten.abs)
    assert not bad
    assert t.dumped == ["torch.ops.aten.log_"]
    assert os.path.exists(tmp_path / "nan_inf_report_rank0.jsonl")


def test_float64_tensors_on_a_profile_without_float64(backend):
    """The device may refuse float64 compute: such outputs are reduced on CPU instead
    (the native check reads the bits, whatever the profile computes)."""
    src = torch.tensor([1.0, float("nan")], dtype=torch.float64)
    with NanInfTracker() as t:
        d = src.to(DEV)                  # a copy is allowed; arithmetic may not be
        h = torch.ones(3, device=DEV) * 2
        t.step()
    # the dispatch mode sees the _to_copy; musa's op path sees the copy kernel under it
    op = "aten._to_copy.default" if backend == "python" else "aten._copy_from.default"
    assert [e["op"] for e in t.events] == [op]
    assert t.events[0]["kind"] == "entered"          # the NaN was in the CPU source tensor
    del d, h


def test_long_run_keeps_bounded_state():
    x = torch.randn(16, device=DEV)
    with NanInfTracker(verbose=False, max_printed=0) as t:
        t.max_events = 5
        for _ in range(40):
            torch.log(-x.abs() - 1) * 2
            t.step()
    assert t.counts["origin"] == 40 and len(t.events) == 5
    assert not t._recs and not t._pending and not t._flag_parts and len(t._bad) <= 80

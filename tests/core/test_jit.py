"""TorchScript on musa: torch.jit.trace with its default check on every profile
(the check compares in float64), its reports as on the CPU, torch.jit.script,
and save/load onto musa devices."""
import copy
import io
import warnings

import pytest
import torch
from torch.jit import TracerWarning, TracingCheckError


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)
        self.register_buffer("shift", torch.linspace(-1, 1, 5))

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(1)
        return self.fc(h) + self.shift, h.half()


@pytest.fixture
def nets():
    torch.manual_seed(0)
    cpu = Net().eval()
    return cpu, copy.deepcopy(cpu).to("musa"), torch.randn(3, 2, 6, 6)


def _tracer_reports(fn, *args, **kwargs):
    """(TracerWarning first lines, TracingCheckError or None) of a checked trace."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch.jit.trace(fn, *args, **kwargs)
            error = None
        except TracingCheckError as e:
            error = str(e).splitlines()[:2]
    lines = [str(w.message).splitlines()[0] for w in caught if w.category is TracerWarning]
    return lines, error


def _same_as_eager_and_cpu(got, eager, cpu):
    """The trace runs the eager kernels (bit-identical); the device computes the CPU's
    result (a loose bound: under the cuda driver, cuDNN and TF32 differ from the CPU)."""
    for g, e, c in zip(got, eager, cpu):
        assert g.device == e.device and torch.equal(g, e)
        torch.testing.assert_close(g.cpu(), c, rtol=1e-2, atol=1e-2)


def test_trace_with_default_check_matches_the_cpu(nets):
    cpu, musa, x = nets
    traced = torch.jit.trace(musa, x.to("musa"))  # check_trace=True compares in float64
    _same_as_eager_and_cpu(traced(x.to("musa")), musa(x.to("musa")), cpu(x))


def test_trace_check_reports_nondeterminism_and_divergence_as_on_the_cpu():
    def noisy(x):
        return x + torch.rand(x.shape, device=x.device)

    def branchy(x):
        return x * 2 if bool(x.sum() > 0) else x - 1

    for fn, args, kwargs in (
        (noisy, (torch.ones(3),), {}),
        (branchy, (torch.ones(3),), {"check_inputs": [(-torch.ones(3),)]}),
    ):
        on_cpu = _tracer_reports(fn, *args, **kwargs)
        moved = tuple(a.to("musa") for a in args)
        kw = {k: [tuple(t.to("musa") for t in c) for c in v] for k, v in kwargs.items()}
        assert _tracer_reports(fn, *moved, **kw) == on_cpu
        assert on_cpu[0] or on_cpu[1]  # the CPU reported something to match
    lines, error = _tracer_reports(noisy, torch.ones(3, device="musa"))
    assert any("nondeterministic" in s for s in lines) and any("does not match" in s for s in lines)
    assert error is None
    assert "Graphs differed" in "".join(
        _tracer_reports(branchy, torch.ones(3, device="musa"),
                        check_inputs=[(-torch.ones(3, device="musa"),)])[1])


def test_trace_check_of_half_and_complex_outputs():
    def f(x):
        return x.to(torch.float16) * 3, torch.polar(x, x)

    x = torch.rand(4) + 0.5
    traced = torch.jit.trace(f, x.to("musa"))
    _same_as_eager_and_cpu(traced(x.to("musa")), f(x.to("musa")), f(x))


def test_script_and_trace_save_and_load_onto_musa(nets):
    cpu, musa, x = nets
    last = torch.musa.device_count() - 1
    scripted = torch.jit.script(musa)
    traced = torch.jit.trace(musa, x.to("musa"))
    for module in (scripted, traced):
        buf = io.BytesIO()
        torch.jit.save(module, buf)
        for where in ("musa", f"musa:{last}", torch.device("musa", last), None):
            buf.seek(0)
            loaded = torch.jit.load(buf, map_location=where)
            dev = torch.device(where if where is not None else "musa:0")
            dev = torch.device(dev.type, dev.index or 0)
            assert {p.device for p in loaded.parameters()} == {dev}
            assert loaded.shift.device == dev
            _same_as_eager_and_cpu(loaded(x.to(dev)), copy.deepcopy(cpu).to(dev)(x.to(dev)),
                                   cpu(x))

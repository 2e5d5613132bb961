"""nn.DataParallel over musa:0 / musa:1 gives the results of one device.

The reference is the same model on musa:0 alone. DataParallel splits the batch,
so sums (the Linear's weight gradient over the batch, the loss) are added in
another order: the tolerance is float32 rounding, 1e-5. Where the split changes
the computation itself (BatchNorm's batch statistics in training), the reference
runs the same split on one device.
"""
from __future__ import annotations

import contextlib
import copy
import threading

import pytest
import torch
from torch import nn

import torch_musa  # noqa: F401
from torch_musa.core import comm

M0, M1 = torch.device("musa:0"), torch.device("musa:1")
pytestmark = pytest.mark.requires_devices(2)
TOL = dict(rtol=1e-5, atol=1e-5)


def _mlp(bn_eval: bool = True) -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.0), nn.Linear(16, 4))
    with torch.no_grad():  # running statistics that are not the identity
        m[1].running_mean.uniform_(-1, 1)
        m[1].running_var.uniform_(0.5, 2)
    m[1].train(not bn_eval)
    return m.to(M0)


class WithBuffers(nn.Module):
    """Reads a buffer in forward and counts its calls in another, in place."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 3)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 3))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.calls += 1
        return self.linear(x) * self.scale


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad for n, p in model.named_parameters()}


def _assert_close_dicts(got: dict, want: dict, **tol):
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] is not None and got[k].device == want[k].device, k
        torch.testing.assert_close(got[k], want[k], **(tol or TOL), msg=lambda m: f"{k}: {m}")


@pytest.mark.parametrize("input_device", ["musa:0", "cpu"])
def test_outputs_and_gradients_equal_one_device(input_device):
    model = _mlp()
    single = copy.deepcopy(model)
    dp = nn.DataParallel(model, device_ids=[0, 1])
    x = torch.randn(10, 8, device=input_device)
    xs, xd = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, ref = dp(xd), single(xs.to(M0))
    assert out.device == M0
    torch.testing.assert_close(out, ref, **TOL)
    out.pow(2).sum().backward()
    ref.pow(2).sum().backward()
    _assert_close_dicts(_grads(model), _grads(single))
    torch.testing.assert_close(xd.grad, xs.grad, **TOL)
    assert xd.grad.device == x.device


def test_batchnorm_training_matches_the_same_split_on_one_device():
    """Each replica normalises its own chunk, and only device[0]'s replica writes
    the running statistics (DataParallel's documented behaviour)."""
    model = _mlp(bn_eval=False)
    first, second = copy.deepcopy(model), copy.deepcopy(model)
    x = torch.randn(10, 8, device=M0)
    out = nn.DataParallel(model, device_ids=[0, 1])(x)
    ref = torch.cat([first(x[:5]), second(x[5:])])
    torch.testing.assert_close(out, ref, **TOL)
    out.pow(2).sum().backward()
    ref.pow(2).sum().backward()
    summed = {n: g + second_g for (n, g), second_g in zip(_grads(first).items(), _grads(second).values())}
    _assert_close_dicts(_grads(model), summed)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(model[1], name), getattr(first[1], name), **TOL)


def test_model_with_buffers():
    torch.manual_seed(0)
    model = WithBuffers().to(M0)
    single = copy.deepcopy(model)
    dp = nn.DataParallel(model, device_ids=[0, 1])
    x = torch.randn(7, 6, device=M0)  # uneven split: 4 + 3
    for _ in range(2):
        torch.testing.assert_close(dp(x), single(x), **TOL)
    # The in-place update of device[0]'s replica is the original buffer's; device 1's is lost.
    assert model.calls.item() == 2 and model.calls.device == M0


def test_sgd_steps_keep_the_single_device_parameters():
    model = _mlp()
    single = copy.deepcopy(model)
    dp = nn.DataParallel(model, device_ids=[0, 1])
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, single)]
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        x, y = torch.randn(12, 8, generator=g).to(M0), torch.randn(12, 4, generator=g).to(M0)
        for net, opt in ((dp, opts[0]), (single, opts[1])):
            opt.zero_grad()
            nn.functional.mse_loss(net(x), y).backward()
            opt.step()
    params, want = dict(model.named_parameters()), dict(single.named_parameters())
    _assert_close_dicts(params, want)
    assert not torch.equal(params["0.weight"], _mlp().state_dict()["0.weight"])  # the steps did move them


def test_output_device_and_device_objects():
    model = _mlp()
    x = torch.randn(6, 8, device=M1)
    ref = copy.deepcopy(model).to(M1)(x)
    dp = nn.DataParallel(model.to(M1), device_ids=["musa:1", torch.device("musa:0")], output_device=0)
    assert dp.src_device_obj == M1
    out = dp(x)
    assert out.device == M0
    torch.testing.assert_close(out.to(M1), ref, **TOL)
    out = nn.parallel.data_parallel(model, x, device_ids=[1, 0])
    assert out.device == M1
    torch.testing.assert_close(out, ref, **TOL)


def test_default_devices_are_all_musa_devices():
    dp = nn.DataParallel(_mlp())
    assert dp.device_ids == list(range(torch.musa.device_count())) and dp.src_device_obj == M0


def test_parameters_on_the_wrong_device_are_named():
    dp = nn.DataParallel(_mlp().to(M1), device_ids=[0, 1])
    with pytest.raises(RuntimeError, match="on device musa:0 \\(device_ids\\[0\\]\\) but found one of them on "
                                           "device: musa:1"):
        dp(torch.randn(4, 8, device=M0))


def test_autocast_reaches_the_replicas():
    model = _mlp()
    single = copy.deepcopy(model)
    dp = nn.DataParallel(model, device_ids=[0, 1])
    x = torch.randn(8, 8, device=M0)
    with torch.autocast("musa", dtype=torch.float16):
        out, ref = dp(x), single(x)
    assert out.dtype == ref.dtype == torch.float16
    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
    with torch.autocast("musa", dtype=torch.float16, enabled=False):
        assert dp(x).dtype == torch.float32


def test_registered_thread_state_reaches_the_replicas():
    """What torch.musa.comm.add_worker_state registers is entered in every replica's
    thread (cuda_compat registers its TorchFunctionMode so), until removed."""
    local = threading.local()

    @contextlib.contextmanager
    def tagged():
        local.tag = "caller's"
        try:
            yield
        finally:
            del local.tag

    def capture():
        return tagged if getattr(local, "tag", None) else None

    class Tags(nn.Module):
        def forward(self, x):
            return x, getattr(local, "tag", None), threading.get_ident()

    dp = nn.DataParallel(Tags(), device_ids=[0, 1])
    x = torch.randn(4, 2, device=M0)
    comm.add_worker_state(capture)
    try:
        with tagged():
            replicas = dp.parallel_apply(dp.replicate(dp.module, [0, 1]), [(x[:2],), (x[2:],)], None)
        assert [r[1] for r in replicas] == ["caller's", "caller's"]
        assert threading.get_ident() not in {r[2] for r in replicas}     # ran in the workers
        replicas = dp.parallel_apply(dp.replicate(dp.module, [0, 1]), [(x[:2],), (x[2:],)], None)
        assert [r[1] for r in replicas] == [None, None]                  # nothing to carry
    finally:
        comm.remove_worker_state(capture)
    with tagged():
        replicas = dp.parallel_apply(dp.replicate(dp.module, [0, 1]), [(x[:2],), (x[2:],)], None)
    assert [r[1] for r in replicas] == [None, None]


@pytest.mark.slow
def test_no_warnings_from_a_training_step(subpython):
    """torch.nn.parallel.comm's 'not compiled with NCCL support' warning is noise on
    musa (musa tensors never take its NCCL path): a plain step prints nothing. In a
    fresh interpreter, as pytest's warning capture drops filters set at import."""
    r = subpython("""
        import torch, torch_musa
        m = torch.nn.Linear(4, 2).to("musa")
        torch.nn.DataParallel(m, device_ids=[0, 1])(torch.randn(6, 4, device="musa")).sum().backward()
        print(m.weight.grad.device)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "musa:0" and r.stderr == ""

"""GradScaler on musa: scale, unscale, inf/NaN skip, growth/backoff, state_dict."""
import pytest
import torch

import torch_musa.amp
import torch_musa.optim

torch_musa.amp.register()

DEV = "musa"


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2).to(DEV)


def _loss(m):
    return m(torch.ones(3, 4, device=DEV)).pow(2).sum()


@pytest.mark.parametrize("make", [lambda **kw: torch.amp.GradScaler(DEV, **kw),
                                  lambda **kw: torch.musa.amp.GradScaler(**kw)],
                         ids=["torch.amp", "torch.musa.amp"])
def test_scale_unscale_step(make):
    m = _model()
    ref = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    scaler = make(init_scale=1024.0)
    scaled = scaler.scale(_loss(m))
    torch.testing.assert_close(scaled, _loss(ref) * 1024)
    scaled.backward()
    scaler.unscale_(opt)
    _loss(ref).backward()
    torch.testing.assert_close(m.weight.grad, ref.weight.grad)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    ref_opt.step()
    scaler.update()
    torch.testing.assert_close(m.weight, ref.weight)
    assert scaler.get_scale() == 1024.0
    assert scaler._scale.device.type == DEV


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
@pytest.mark.parametrize("fused", [False, True])
def test_non_finite_grads_skip_the_step_and_back_off(bad, fused):
    m = _model()
    opt = torch.optim.Adam(m.parameters(), lr=0.1, fused=fused)
    scaler = torch.amp.GradScaler(DEV, init_scale=256.0, backoff_factor=0.25)
    before = [p.detach().clone() for p in m.parameters()]
    scaler.scale(_loss(m)).backward()
    m.bias.grad[0] = bad
    scaler.step(opt)
    scaler.update()
    for p, b in zip(m.parameters(), before):
        torch.testing.assert_close(p.detach(), b)
    assert scaler.get_scale() == 64.0
    # the next, finite step goes through
    opt.zero_grad()
    scaler.scale(_loss(m)).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(m.weight.detach(), before[0])


def test_growth_after_interval():
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    scaler = torch.musa.amp.GradScaler(init_scale=8.0, growth_factor=4.0, growth_interval=3)
    scales = []
    for _ in range(7):
        opt.zero_grad()
        scaler.scale(_loss(m)).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    assert scales == [8.0, 8.0, 32.0, 32.0, 32.0, 128.0, 128.0]


def test_state_dict_round_trip():
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    scaler = torch.musa.amp.GradScaler(init_scale=16.0, growth_interval=5)
    scaler.scale(_loss(m)).backward()
    scaler.step(opt)
    scaler.update()
    sd = scaler.state_dict()
    assert sd == {"scale": 16.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 5,
                  "_growth_tracker": 1}
    other = torch.amp.GradScaler(DEV)
    other.load_state_dict(sd)
    assert other.get_scale() == 16.0 and other._get_growth_tracker() == 1
    assert other.state_dict() == sd


def test_fused_adam_takes_the_scale_itself():
    """Fused optimizers unscale inside the kernel (grad_scale/found_inf)."""
    results = []
    for cls in (torch_musa.optim.FusedAdam, lambda ps, **kw: torch.optim.Adam(ps, foreach=False, **kw)):
        m = _model()
        opt = cls(m.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler(DEV, init_scale=512.0)
        for _ in range(3):
            opt.zero_grad()
            scaler.scale(_loss(m)).backward()
            scaler.step(opt)
            scaler.update()
        results.append(m.weight.detach().cpu())
    torch.testing.assert_close(results[0], results[1], rtol=1e-6, atol=1e-6)


def test_disabled_scaler_is_a_pass_through():
    m = _model()
    scaler = torch.musa.amp.GradScaler(enabled=False)
    loss = _loss(m)
    assert scaler.scale(loss) is loss
    assert not scaler.is_enabled()

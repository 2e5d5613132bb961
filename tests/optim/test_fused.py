"""Fused and foreach optimizers on musa match the unfused ones (and the CPU)."""
import pytest
import torch

from torch_musa.optim import FusedAdam, FusedAdamW

DEV = "musa"
SHAPES = [(7, 5), (5,), (3, 4, 2), (1,)]


def _params(device, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g).to(dtype).to(device).requires_grad_() for s in SHAPES]


def _train(make_opt, device, dtype=torch.float32, steps=4):
    params = _params(device, dtype)
    opt = make_opt(params)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        opt.zero_grad()
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).to(dtype).to(device)
        opt.step()
    return [p.detach().float().cpu() for p in params], opt


CONFIGS = {
    "adam": (torch.optim.Adam, dict(lr=0.01)),
    "adam_wd_amsgrad": (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    "adam_maximize": (torch.optim.Adam, dict(lr=0.01, maximize=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.05)),
    "adamw_amsgrad": (torch.optim.AdamW, dict(lr=0.01, amsgrad=True)),
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum_nesterov_wd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
}


_ADAM_LAST_BIT = pytest.mark.requires_host_driver(
    "CUDA's fused/foreach Adam and AdamW differ from its unfused ones in the last bit (as on native "
    "cuda; SGD matches)")


@pytest.mark.parametrize("mode", ["fused", "foreach"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=_ADAM_LAST_BIT) if n.startswith("adam") else n
                                  for n in sorted(CONFIGS)])
def test_fused_and_foreach_match_unfused(name, mode):
    cls, kw = CONFIGS[name]
    ref, _ = _train(lambda ps: cls(ps, foreach=False, **kw), DEV)
    got, opt = _train(lambda ps: cls(ps, **{mode: True}, **kw), DEV)
    assert opt.param_groups[0][mode] is True
    cpu, _ = _train(lambda ps: cls(ps, foreach=False, **kw), "cpu")
    for a, b, c in zip(got, ref, cpu):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(b, c, rtol=0, atol=0)


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_fused_float16_params(cls):
    ref, _ = _train(lambda ps: cls(ps, lr=0.01, foreach=False), DEV, torch.float16)
    got, _ = _train(lambda ps: cls(ps, lr=0.01, fused=True), DEV, torch.float16)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("fused_cls,cls,kw", [
    (FusedAdam, torch.optim.Adam, dict(lr=0.01, weight_decay=0.1)),
    (FusedAdam, torch.optim.Adam, dict(lr=0.01, amsgrad=True)),
    (FusedAdamW, torch.optim.AdamW, dict(lr=0.01)),
    (FusedAdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.2, betas=(0.8, 0.9), eps=1e-6)),
])
def test_torch_musa_fused_adam_matches_torch(fused_cls, cls, kw):
    ref, _ = _train(lambda ps: cls(ps, foreach=False, **kw), DEV)
    got, opt = _train(lambda ps: fused_cls(ps, **kw), DEV)
    assert opt.param_groups[0]["fused"] is True
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_fused_adamw_defaults():
    p = _params(DEV)
    opt = FusedAdamW(p)
    g = opt.param_groups[0]
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"], g["amsgrad"]) == (1e-3, (0.9, 0.999), 1e-8, 1e-2, False)
    assert FusedAdam(p).param_groups[0]["weight_decay"] == 0.0


def test_fused_state_dict_round_trip():
    got, opt = _train(lambda ps: FusedAdamW(ps, lr=0.01), DEV, steps=2)
    sd = opt.state_dict()
    params = [g.clone().to(DEV).requires_grad_() for g in got]
    opt2 = FusedAdamW(params, lr=0.01)
    opt2.load_state_dict(sd)
    st = opt2.state[params[0]]
    assert st["exp_avg"].device.type == DEV and float(st["step"]) == 2.0
    torch.testing.assert_close(st["exp_avg_sq"].cpu(), sd["state"][0]["exp_avg_sq"].cpu())


def test_fused_rejects_differentiable_and_integer_params():
    with pytest.raises(RuntimeError, match="differentiable"):
        FusedAdam(_params(DEV), differentiable=True)
    with pytest.raises(RuntimeError):
        FusedAdamW([torch.zeros(3, dtype=torch.int64, device=DEV)])

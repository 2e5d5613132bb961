"""The real torch_musa's module paths import here and mean this project's objects."""
import importlib

import pytest
import torch

import torch_musa


def test_core_utils_get_musa_device_index():
    from torch_musa.core._utils import _get_musa_device_index

    current = torch.musa.current_device()
    assert _get_musa_device_index(None) == current
    assert _get_musa_device_index("musa") == current
    assert _get_musa_device_index("musa:0") == 0
    assert _get_musa_device_index(torch.device("musa", 0)) == 0
    assert _get_musa_device_index(torch.musa.device(0)) == 0
    assert _get_musa_device_index("cpu", allow_cpu=True) == -1
    # upstream's own test (tests/unittest/core/test_device.py)
    with pytest.raises(RuntimeError, match="Invalid device string: 'musa0'"):
        _get_musa_device_index("musa0", optional=True)
    with pytest.raises(ValueError, match="Expected a musa device, but got: cpu"):
        _get_musa_device_index(torch.device("cpu"), optional=True)


def test_core_amp_grad_scaler_is_torch_musa_amp():
    from torch.amp.grad_scaler import OptState as TorchOptState

    from torch_musa.core.amp.grad_scaler import GradScaler, OptState

    assert OptState is TorchOptState
    assert GradScaler is torch.musa.amp.GradScaler
    assert GradScaler is torch_musa.amp.GradScaler
    scaler = GradScaler(init_scale=4.0)
    p = torch.nn.Parameter(torch.ones(3, device="musa"))
    opt = torch.optim.SGD([p], lr=1.0)
    scaler.scale(p.sum()).backward()
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(p.detach().cpu(), torch.zeros(3))


def test_musac_is_the_binding_module():
    from torch_musa import _C

    assert torch.musa._MUSAC is _C
    assert torch_musa._MUSAC is _C
    assert importlib.import_module("torch_musa._MUSAC") is _C

"""Training on musa gives what training on the CPU gives.

MLP and CNN run the same host kernels on both devices, so losses and
parameters are bit-identical. The transformer's dropout takes PyTorch's fused
path on an accelerator (native_dropout) and the unfused one on the CPU: same
random mask, a different rounding of the scale, so a float32 tolerance.
"""
import pytest
import torch

from torch_musa.testing.models import train

TOLERANCE = {"mlp": 0.0, "cnn": 0.0, "transformer": 2e-4}


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
def test_twenty_steps_match_the_cpu(kind, optimizer):
    musa_losses, musa_params = train(kind, "musa", steps=20, optimizer=optimizer, foreach=True)
    cpu_losses, cpu_params = train(kind, "cpu", steps=20, optimizer=optimizer, foreach=True)
    tol = TOLERANCE[kind]
    if tol == 0.0:
        assert musa_losses == cpu_losses
    else:
        assert musa_losses == pytest.approx(cpu_losses, abs=1e-5)
    assert musa_params.keys() == cpu_params.keys()
    for name in musa_params:
        torch.testing.assert_close(musa_params[name], cpu_params[name], rtol=0, atol=tol, msg=name)


def test_training_on_the_second_device():
    losses, params = train("cnn", "musa:1", steps=3)
    cpu_losses, _ = train("cnn", "cpu", steps=3)
    assert losses == cpu_losses

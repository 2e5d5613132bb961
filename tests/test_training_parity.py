"""Training on musa gives what training on the CPU gives.

The same host kernels run on both devices and musa's generators draw what the
CPU's draw for a seed (dropout included), so losses and parameters are
bit-identical.
"""
import pytest
import torch

from torch_musa.testing.models import train

@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("kind", ["mlp", "cnn", "transformer"])
@pytest.mark.requires_host_driver(
    "bit-identity with the CPU holds where the same kernels run; under the cuda driver musa runs CUDA"
    " kernels (tests/core/test_cuda_driver.py checks bit-identity with native cuda)")
def test_twenty_steps_match_the_cpu(kind, optimizer):
    musa_losses, musa_params = train(kind, "musa", steps=20, optimizer=optimizer, foreach=True)
    cpu_losses, cpu_params = train(kind, "cpu", steps=20, optimizer=optimizer, foreach=True)
    assert musa_losses == cpu_losses
    assert musa_params.keys() == cpu_params.keys()
    for name in musa_params:
        assert torch.equal(musa_params[name], cpu_params[name]), name


@pytest.mark.requires_devices(2)
def test_training_on_the_second_device():
    losses, params = train("cnn", "musa:1", steps=3)
    cpu_losses, _ = train("cnn", "cpu", steps=3)
    assert losses == cpu_losses

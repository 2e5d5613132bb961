"""Generators: per-device state, reproducibility, and agreement with the CPU."""
import pytest
import torch


def test_same_seed_same_numbers():
    torch.musa.manual_seed(123)
    a = torch.randn(100, device="musa")
    torch.musa.manual_seed(123)
    b = torch.randn(100, device="musa")
    assert torch.equal(a.cpu(), b.cpu())
    assert torch.musa.initial_seed() == 123


@pytest.mark.requires_host_driver(
    "under the cuda driver musa draws CUDA's Philox stream, not the CPU's mt19937")
@pytest.mark.requires_devices(2)
def test_musa_draws_what_the_cpu_draws_for_the_same_seed():
    torch.manual_seed(7)  # seeds the CPU and every musa generator
    m = torch.rand(64, device="musa").cpu()
    m1 = torch.rand(64, device="musa:1").cpu()
    torch.manual_seed(7)
    c = torch.rand(64)
    assert torch.equal(m, c) and torch.equal(m1, c)


@pytest.mark.requires_devices(2)
def test_state_save_and_restore():
    torch.musa.manual_seed(5)
    state = torch.musa.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(10, device="musa")
    torch.musa.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.randn(10, device="musa").cpu())
    states = torch.musa.get_rng_state_all()
    assert len(states) == torch.musa.device_count()
    x = torch.randn(3, device="musa:1")
    torch.musa.set_rng_state_all(states)
    assert torch.equal(x.cpu(), torch.randn(3, device="musa:1").cpu())


@pytest.mark.requires_devices(2)
def test_devices_have_independent_generators():
    torch.musa.manual_seed_all(1)
    with torch.musa.device(1):
        torch.musa.manual_seed(2)
    a0 = torch.rand(8, device="musa:0").cpu()
    a1 = torch.rand(8, device="musa:1").cpu()
    assert not torch.equal(a0, a1)


@pytest.mark.requires_host_driver(
    "under the cuda driver musa draws CUDA's Philox stream, not the CPU's mt19937")
def test_explicit_generators():
    g = torch.Generator("musa")
    assert g.device == torch.device("musa", 0)
    g.manual_seed(9)
    a = torch.randn(5, device="musa", generator=g)
    g.manual_seed(9)
    assert torch.equal(a.cpu(), torch.randn(5, device="musa", generator=g).cpu())
    assert torch.equal(a.cpu(), torch.randn(5, generator=torch.Generator().manual_seed(9)))
    torch.musa.seed()
    assert torch.musa.initial_seed() != 9


def test_dropout_and_randperm_use_the_musa_generator():
    torch.manual_seed(3)
    d = torch.nn.functional.dropout(torch.ones(100, device="musa"), 0.5)
    p = torch.randperm(10, device="musa")
    torch.manual_seed(3)
    d2 = torch.nn.functional.dropout(torch.ones(100, device="musa"), 0.5)
    assert torch.equal(d.cpu(), d2.cpu()) and p.device.type == "musa"

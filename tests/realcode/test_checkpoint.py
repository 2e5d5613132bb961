"""Activation checkpointing with dropout gives the gradients of the plain run
(issue 18 item 2).

``torch.utils.checkpoint`` recomputes the forward in backward; it replays the
same dropout masks only if it saved and restores the device's RNG state, which
it does only when ``torch.musa._initialized`` says the device is in use. Without
that, Hugging Face's ``gradient_checkpointing_enable()`` trains on gradients
that belong to no forward pass, and nothing raises.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint_sequential

from ._common import assert_same, assert_same_params
from ._gpt import TinyGPT, lm_loss


def _grads(device, autocast_dtype=None, **checkpointing):
    """Loss and parameter gradients of one forward/backward of the dropout GPT."""
    torch.manual_seed(0)
    model = TinyGPT().to(device)
    if checkpointing:
        model.gradient_checkpointing_enable(**checkpointing)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 48, (4, 9), generator=g).to(device)
    torch.manual_seed(2)  # the dropout masks: the same stream on every device
    with torch.autocast(torch.device(device).type, dtype=autocast_dtype or torch.float16,
                        enabled=autocast_dtype is not None):
        loss = lm_loss(model(tokens[:, :-1]), tokens[:, 1:])
    loss.backward()
    return loss.item(), {n: p.grad.to("cpu", copy=True) for n, p in model.named_parameters()}


@pytest.mark.parametrize("device", ["musa", pytest.param("musa:1", marks=pytest.mark.requires_devices(2))])
@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "non-reentrant"])
def test_checkpointed_dropout_gradients_equal_the_plain_run(use_reentrant, device):
    loss, grads = _grads(device, use_reentrant=use_reentrant)
    plain_loss, plain_grads = _grads(device)
    assert_same(loss, plain_loss, "checkpointed loss")
    assert_same_params(grads, plain_grads,
                       f"checkpointed gradients (use_reentrant={use_reentrant})")


@pytest.mark.requires_host_driver("compares dropout masks with the CPU generator's")
@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "non-reentrant"])
def test_checkpointed_dropout_gradients_equal_the_cpus(use_reentrant):
    loss, grads = _grads("musa", use_reentrant=use_reentrant)
    cpu_loss, cpu_grads = _grads("cpu", use_reentrant=use_reentrant)
    assert_same(loss, cpu_loss, "checkpointed loss against the CPU run")
    assert_same_params(grads, cpu_grads, "checkpointed gradients against the CPU run")


@pytest.mark.requires_host_driver("compares dropout masks with the CPU generator's")
@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "non-reentrant"])
def test_without_preserved_rng_state_musa_draws_what_the_cpu_draws(use_reentrant):
    """preserve_rng_state=False recomputes with fresh masks, on the CPU (the
    reference device) as on musa: the gradients are not the plain run's, but both
    devices give the same ones."""
    kwargs = {"use_reentrant": use_reentrant, "preserve_rng_state": False}
    loss, grads = _grads("musa", **kwargs)
    ref_loss, ref_grads = _grads("cpu", **kwargs)
    assert_same(loss, ref_loss, "loss, RNG state not preserved")
    assert_same_params(grads, ref_grads, "checkpointed gradients, RNG state not preserved")
    _, plain = _grads("cpu")
    assert not torch.equal(ref_grads["h.0.c_fc.weight"], plain["h.0.c_fc.weight"]), (
        "fresh masks in the recomputation should change the gradients; the case tests nothing")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "non-reentrant"])
def test_recomputation_runs_under_the_forwards_autocast(use_reentrant, dtype):
    """Mixed precision with checkpointing (Trainer's bf16 + gradient_checkpointing):
    the recomputed forward must run in musa's autocast state of the forward."""
    loss, grads = _grads("musa", dtype, use_reentrant=use_reentrant)
    plain_loss, plain_grads = _grads("musa", dtype)
    assert loss == plain_loss
    assert_same_params(grads, plain_grads, f"checkpointed {dtype} autocast gradients")


def _sequential_input_grad(device, segments):
    """Input gradient of a dropout stack, checkpointed in ``segments`` (0: not at all)."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16),
                                                        torch.nn.Dropout(0.3),
                                                        torch.nn.GELU()) for _ in range(4)])
    layers.to(device)
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)).to(device)
    x.requires_grad_()
    torch.manual_seed(2)
    y = (checkpoint_sequential(layers, segments, x, use_reentrant=False) if segments
         else layers(x))
    y.square().sum().backward()
    return x.grad.cpu()


def test_checkpoint_sequential_with_dropout():
    assert_same(_sequential_input_grad("musa", 2), _sequential_input_grad("musa", 0),
                "checkpoint_sequential input gradient")


@pytest.mark.requires_host_driver("compares dropout masks with the CPU generator's")
def test_checkpoint_sequential_with_dropout_equals_the_cpus():
    assert_same(_sequential_input_grad("musa", 2), _sequential_input_grad("cpu", 2),
                "checkpoint_sequential against the CPU")


def test_musa_reports_itself_initialized_once_used():
    """The flag checkpoint reads: a musa tensor exists, so the device is initialized."""
    torch.zeros(1, device="musa")
    assert torch.musa._initialized is True
    assert torch.musa.is_initialized()

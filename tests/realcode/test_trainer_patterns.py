"""What Hugging Face's Trainer and accelerate do with musa, in plain torch (CI has
neither package).

* Checkpoint resume: Trainer's ``_save_rng_state`` writes ``torch.get_rng_state()``
  and ``torch.musa.get_rng_state()`` into ``rng_state.pth``; accelerate's
  ``save_state`` writes ``torch.musa.get_rng_state_all()``. On resume they are
  set back with the matching setters. With dropout, the resumed run equals the
  uninterrupted one only if musa's state round-trips through ``torch.save``.
* bfloat16 autocast of ``F.cross_entropy`` on bfloat16 logits follows CUDA's
  lists, not the CPU's: CUDA (and musa) do not list ``cross_entropy_loss``, whose
  composite calls ``log_softmax(x, dim, dtype=x.dtype)``, so the log-probabilities
  are rounded to bfloat16 before ``nll_loss`` runs in float32. The CPU lists
  ``cross_entropy_loss`` as float32. This is the by-design loss difference seen
  in accelerate's ``mixed_precision="bf16"`` BERT run (docs/REALCODE.md).
"""
from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ._common import assert_same


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.ReLU(), nn.Linear(16, 4)).to("musa")


def _steps(model, opt, first, last):
    losses = []
    for i in range(first, last):
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(i)).to("musa")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _checkpoint(model, opt, all_devices):
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "cpu": torch.get_rng_state(),
                "musa": torch.musa.get_rng_state_all() if all_devices else torch.musa.get_rng_state()}, buf)
    buf.seek(0)
    return buf


def _resume(buf, restore_musa, all_devices):
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(123)  # the new process seeds again, as Trainer does
    state = torch.load(buf, weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["cpu"])
    if restore_musa:
        (torch.musa.set_rng_state_all if all_devices else torch.musa.set_rng_state)(state["musa"])
    return model, opt


@pytest.mark.parametrize("all_devices", [False, True], ids=["trainer", "accelerate"])
def test_resumed_dropout_run_equals_the_uninterrupted_one(all_devices):
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _steps(model, opt, 0, 3)
    buf = _checkpoint(model, opt, all_devices)
    expected = _steps(model, opt, 3, 6)
    params = {k: v.cpu() for k, v in model.state_dict().items()}

    model2, opt2 = _resume(buf, True, all_devices)
    assert_same(torch.tensor(_steps(model2, opt2, 3, 6)), torch.tensor(expected), "resumed losses")
    assert_same({k: v.cpu() for k, v in model2.state_dict().items()}, params, "resumed parameters")

    buf.seek(0)
    model3, opt3 = _resume(buf, False, all_devices)
    # Without musa's state the dropout masks are the reseeded ones: the check above is not vacuous.
    assert _steps(model3, opt3, 3, 6) != expected


def test_autocast_cross_entropy_rounds_log_probs_as_cuda_does():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 5, generator=g).bfloat16()
    target = torch.randint(0, 5, (16,), generator=g)
    with torch.autocast("musa", dtype=torch.bfloat16):
        loss = F.cross_entropy(logits.to("musa"), target.to("musa"))
    assert loss.dtype == torch.float32
    cuda_rule = F.nll_loss(F.log_softmax(logits, 1, dtype=torch.bfloat16).float(), target)
    assert_same(loss.cpu(), cuda_rule, "cross_entropy under musa bf16 autocast", dtype=torch.bfloat16)
    full = F.cross_entropy(logits.float(), target)
    assert loss.item() != full.item()  # the CPU's autocast (float32 cross_entropy_loss) would give this

"""fp16 mixed precision with GradScaler, the optimizer built before ``.to()``
(accelerate's order), against the same loop on the CPU device with
``torch.amp.GradScaler("cpu")`` and CPU fp16 autocast.

Both autocast policies run Linear in float16, so with the loss taken on float32
logits the runs are bit-identical: same losses, same scale sequence (growth, and
the back-off on the step whose gradients overflow), same parameters. Under
autocast the policies differ in one place real code meets: the CPU's puts the
whole ``cross_entropy`` on its float32 list, CUDA's (which musa follows) does not,
so log_softmax runs in float16 and nll_loss in float32; the second test builds
that computation explicitly on the CPU and still compares bit for bit (to
float16 rounding under the cuda driver).

Before issue 18 item 1 was fixed the optimizer stepped the old CPU tensors and
``scaler.step`` raised "No inf checks were recorded for this optimizer".
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ._common import assert_same, assert_same_params, feature_batches, params_of

STEPS = 8
OVERFLOW_STEP = 4  # an inf in the batch: the scaler must skip this step and halve


def _loss_on_float32_logits(logits, y):
    return F.cross_entropy(logits.float(), y)


def _cross_entropy(logits, y):
    return F.cross_entropy(logits, y)


def _cuda_policy_cross_entropy(logits, y):
    """What cross_entropy computes under CUDA's autocast policy, spelled out."""
    return F.nll_loss(F.log_softmax(logits, 1).float(), y)


def _run(device, loss_fn):
    dev_type = torch.device(device).type
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.to(device)
    scaler = torch.amp.GradScaler(dev_type, init_scale=2.0 ** 14, growth_interval=2)
    losses, scales, skipped = [], [], None
    for step, (x, y) in enumerate(feature_batches(STEPS, 8, 16, 4)):
        if step == OVERFLOW_STEP:
            x[0, 0] = float("inf")
            before = params_of(model)
        x, y = x.to(device), y.to(device)
        with torch.autocast(dev_type, dtype=torch.float16):
            logits = model(x)
            assert logits.dtype == torch.float16
            loss = loss_fn(logits, y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if step == OVERFLOW_STEP:
            skipped = params_of(model)
            assert skipped.keys() == before.keys()
            assert all(torch.equal(skipped[n], before[n]) for n in before), (
                f"{device}: the overflowing step changed the parameters")
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, params_of(model)


def _assert_same_runs(musa, ref):
    m_losses, m_scales, m_params = musa
    c_losses, c_scales, c_params = ref
    assert m_scales == c_scales
    assert c_scales[OVERFLOW_STEP] == c_scales[OVERFLOW_STEP - 1] / 2, "no back-off: tests nothing"
    assert math.isnan(m_losses[OVERFLOW_STEP]) or math.isinf(m_losses[OVERFLOW_STEP])
    assert_same([v for i, v in enumerate(m_losses) if i != OVERFLOW_STEP],
                [v for i, v in enumerate(c_losses) if i != OVERFLOW_STEP], "fp16 losses",
                dtype=torch.float16)
    assert_same_params(m_params, c_params, "fp16 GradScaler training", dtype=torch.float16)


def test_grad_scaler_fp16_matches_the_cpu_run():
    _assert_same_runs(_run("musa", _loss_on_float32_logits), _run("cpu", _loss_on_float32_logits))


@pytest.mark.parametrize("device", ["musa", pytest.param("musa:1", marks=pytest.mark.requires_devices(2))])
def test_cross_entropy_under_autocast_follows_the_cuda_policy(device):
    _assert_same_runs(_run(device, _cross_entropy), _run("cpu", _cuda_policy_cross_entropy))


def test_the_cpu_policy_differs_there():
    """Shows the second test checks something: on the CPU the two losses differ."""
    cpu_policy, _, _ = _run("cpu", _cross_entropy)
    cuda_policy, _, _ = _run("cpu", _cuda_policy_cross_entropy)
    assert cpu_policy[0] != cuda_policy[0]

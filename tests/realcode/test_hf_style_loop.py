"""A Hugging Face Trainer / accelerate style loop, written out without the
libraries, on musa against the same loop on the CPU device.

What it gathers in one run: a GPT-2-shaped model built from a config dict (tied
head, SDPA causal attention with dropout, tanh GELU), AdamW with weight-decay
parameter groups (none on biases and LayerNorm), a linear warmup/decay LambdaLR,
gradient accumulation, clip_grad_norm_, gradient checkpointing, the model moved
to the device after the optimizer and scheduler exist, an evaluation pass and a
state_dict save/load. The same host kernels and random draws run on both
devices, so everything is compared bit for bit.
"""
from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from ._common import assert_same, assert_same_params, params_of, token_batches
from ._gpt import CONFIG, TinyGPT, lm_loss

ACCUMULATE, UPDATES, WARMUP = 2, 4, 2


def _param_groups(model: nn.Module, weight_decay: float):
    """Decay on matrices; none on biases and LayerNorm weights (as transformers does)."""
    no_decay = {f"{m_name}.{p_name}" if m_name else p_name
                for m_name, module in model.named_modules() if isinstance(module, nn.LayerNorm)
                for p_name, _ in module.named_parameters(recurse=False)}
    decay, rest = [], []
    for name, p in model.named_parameters():
        (rest if name in no_decay or name.endswith("bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def _linear_warmup(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return factor


def _train(device, checkpointing):
    torch.manual_seed(0)
    model = TinyGPT(dict(CONFIG))
    if checkpointing is not None:
        model.gradient_checkpointing_enable(use_reentrant=checkpointing)
    opt = torch.optim.AdamW(_param_groups(model, 0.1), lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _linear_warmup(WARMUP, UPDATES))
    model.to(device)  # after the optimizer, as accelerate's prepare() does
    assert model.lm_head.weight is model.wte.weight

    torch.manual_seed(1)
    model.train()
    losses, norms, lrs = [], [], []
    batches = token_batches(ACCUMULATE * UPDATES, batch=4, seq=12, vocab=CONFIG["vocab_size"])
    for step, (x, y) in enumerate(batches):
        loss = lm_loss(model(x.to(device)), y.to(device)) / ACCUMULATE
        loss.backward()
        losses.append(loss.item())
        if (step + 1) % ACCUMULATE == 0:
            norms.append(nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
            opt.step()
            sched.step()
            opt.zero_grad()
            lrs.append(sched.get_last_lr())

    model.eval()
    with torch.no_grad():
        x, _ = next(token_batches(1, batch=2, seq=12, vocab=CONFIG["vocab_size"], seed=7))
        logits = model(x.to(device)).cpu()

    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    reloaded = TinyGPT(dict(CONFIG))
    reloaded.load_state_dict(torch.load(buf, map_location="cpu"))
    assert_same_params(params_of(reloaded), params_of(model), f"state_dict saved from {device}")
    return losses, norms, lrs, params_of(model), logits


@pytest.mark.requires_host_driver("compares dropout masks with the CPU generator's")
@pytest.mark.parametrize("checkpointing", [None, True, False],
                         ids=["no-checkpointing", "reentrant", "non-reentrant"])
def test_hf_style_training_matches_the_cpu(checkpointing):
    losses, norms, lrs, params, logits = _train("musa", checkpointing)
    ref_losses, ref_norms, ref_lrs, ref_params, ref_logits = _train("cpu", checkpointing)
    assert lrs == ref_lrs and lrs[0] != lrs[-1]
    assert_same(losses, ref_losses, "losses")
    assert_same(norms, ref_norms, "gradient norms")
    assert_same_params(params, ref_params, "HF-style training")
    assert_same(logits, ref_logits, "evaluation logits")


def test_checkpointing_does_not_change_the_training():
    """On musa, checkpointed training (dropout recomputed) is the plain training."""
    plain = _train("musa", None)
    for reentrant in (True, False):
        run = _train("musa", reentrant)
        assert_same(run[0], plain[0], f"checkpointed (use_reentrant={reentrant}) losses")
        assert_same_params(run[3], plain[3], f"checkpointed (use_reentrant={reentrant}) vs plain")

"""Validate musa-doctor's step-time estimate against measured step times.

Run on a machine with an NVIDIA GPU, under the cuda driver, with the GPU's card:

    TORCH_MUSA_DRIVER=cuda python benchmarks/doctor_validate.py --card h200

For GPT-2 small (HF, batch 16 x 1024, bf16 autocast, fused AdamW), ResNet-18
(HF ResNet, basic blocks, batch 64 x 224^2, bf16 autocast, SGD momentum) and a
2-layer LSTM language model (650 wide, vocab 10,000, bptt 35, batch 20, fp32,
clipped SGD), all on musa: warm up, record one training step with musa-doctor's
session, estimate it on --card with the roofline model, then time --steps steps
without the session. Prints estimate, band, measured time and the error per model
(goal: within +-30 %); --json writes the numbers. ``--small`` shrinks every model
so the script runs on the host driver (a smoke test; its times mean nothing).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from torch_musa.utils.doctor import roofline
from torch_musa.utils.doctor.cards import card
from torch_musa.utils.doctor.session import Session

DEVICE = "musa"


def gpt2(small: bool):
    from transformers import GPT2Config, GPT2LMHeadModel
    batch, seq = (2, 64) if small else (16, 1024)
    cfg = GPT2Config(n_positions=seq, **({"n_layer": 2, "n_embd": 128, "n_head": 4} if small else {}))
    model = GPT2LMHeadModel(cfg).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=DEVICE)

    def step():
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def resnet18(small: bool):
    from transformers import ResNetConfig, ResNetForImageClassification
    batch, size = (2, 64) if small else (64, 224)
    cfg = ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512],
                       embedding_size=64, num_labels=1000)
    model = ResNetForImageClassification(cfg).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=DEVICE)
    y = torch.randint(0, 1000, (batch,), device=DEVICE)

    def step():
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = model(pixel_values=x, labels=y).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def lstm_lm(small: bool):
    vocab, hidden, bptt, batch = (1000, 64, 8, 4) if small else (10000, 650, 35, 20)
    embed = torch.nn.Embedding(vocab, hidden)
    rnn = torch.nn.LSTM(hidden, hidden, num_layers=2, dropout=0.5)
    decoder = torch.nn.Linear(hidden, vocab)
    model = torch.nn.ModuleList([embed, rnn, decoder]).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    data = torch.randint(0, vocab, (bptt + 1, batch), device=DEVICE)

    def step():
        out, _ = rnn(embed(data[:-1]))
        loss = torch.nn.functional.cross_entropy(decoder(out).view(-1, vocab), data[1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


MODELS = {"gpt2-small": gpt2, "resnet18": resnet18, "lstm-lm": lstm_lm}


def measure(step, steps: int) -> float:
    torch.musa.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.musa.synchronize()
    return (time.perf_counter() - t0) / steps


def validate(name: str, card_key: str, small: bool, warmup: int, steps: int) -> dict:
    step = MODELS[name](small)
    for _ in range(warmup):
        step()
    with Session([os.path.dirname(os.path.abspath(__file__))], steps_from_optimizer=False) as s:
        step()
    e = roofline.estimate(s.ops.steps[0], card(card_key))
    measured = measure(step, steps)
    return {"model": name, "card": card_key, "estimate_s": e["estimate_s"], "low_s": e["low_s"],
            "high_s": e["high_s"], "device_s": e["device_s"], "host_s": e["host_s"], "measured_s": measured,
            "error": e["estimate_s"] / measured - 1, "in_band": e["low_s"] <= measured <= e["high_s"],
            "top_ops": [(o["op"], round(o["time_s"] * 1e3, 3)) for o in e["ops"][:5]]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--card", default="h200", help="the card whose peaks the estimate uses (default h200)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--small", action="store_true", help="tiny models, for the host driver")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    rows = []
    print(f"{'model':<12} {'estimate':>10} {'band':>21} {'measured':>10} {'error':>8}  bound")
    for name in a.models.split(","):
        if name not in MODELS:
            sys.exit(f"unknown model {name!r}: choose from {', '.join(MODELS)}")
        r = validate(name, a.card, a.small, a.warmup, a.steps)
        rows.append(r)
        bound = "host" if r["host_s"] > r["device_s"] else "device"
        band = f"{r['low_s'] * 1e3:.2f}-{r['high_s'] * 1e3:.2f}ms"
        print(f"{name:<12} {r['estimate_s'] * 1e3:>8.2f}ms {band:>21} {r['measured_s'] * 1e3:>8.2f}ms "
              f"{r['error'] * 100:>+7.1f}%  {bound}", flush=True)
    worst = max(abs(r["error"]) for r in rows)
    print(f"largest error {worst * 100:.1f} % (goal: within 30 %) on {a.card}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

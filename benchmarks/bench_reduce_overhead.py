"""torch.compile(mode="reduce-overhead") on musa vs the default mode: MUSA graph replay
against the compiled wrapper called directly.

    python benchmarks/bench_reduce_overhead.py [--iters 200]

Two steps: inference of a small MLP (many small kernels: where launch overhead
dominates) and a small CNN's training step. The two modes take turns call by call;
medians of wall time per call, and the ratio reduce-overhead / default (below 1:
graphs are faster). Under the host driver a replay calls each captured kernel again
without the Python wrapper; nothing here asserts a target, it reports.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import torch_musa  # noqa: F401
from torch_musa.testing.models import SmallCNN


def _mlp_step(mode: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())])
    model = model.to("musa").eval()
    f = torch.compile(model, mode=mode)
    x = torch.randn(8, 64, device="musa")

    def step():
        with torch.no_grad():
            f(x)
    return step


def _cnn_step(mode: str):
    torch.manual_seed(0)
    model = SmallCNN().to("musa")
    f = torch.compile(model, mode=mode)
    x, y = torch.randn(16, 3, 32, 32, device="musa"), torch.randint(0, 10, (16,), device="musa")

    def step():
        loss = torch.nn.functional.cross_entropy(f(x), y)
        loss.backward()
    return step


def _time(steps: dict, iters: int) -> dict:
    for step in steps.values():  # compile, warm up, capture
        for _ in range(3):
            step()
    times = {name: [] for name in steps}
    for _ in range(iters):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            torch.musa.synchronize()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    for name, make in (("mlp inference", _mlp_step), ("cnn training", _cnn_step)):
        t = _time({mode: make(mode) for mode in ("default", "reduce-overhead")}, args.iters)
        print(f"{name}: default {t['default'] * 1e6:.0f} us, reduce-overhead "
              f"{t['reduce-overhead'] * 1e6:.0f} us, ratio {t['reduce-overhead'] / t['default']:.2f}")


if __name__ == "__main__":
    main()

"""How much of a training step's device time torch.profiler attributes to musa kernels:
an eager CNN step and a compiled (Inductor) transformer step.

    python benchmarks/bench_profiler.py [--steps 5] [--threads N]

Under the host driver a kernel runs on the calling thread, inside the op that launched
it, so two spans bound the device's busy time from above: the step's wall time
(profiled, synchronized) and, tighter, the time inside top-level ops (what Python, the
profiler and synchronisation add between ops is no device work). The recorded kernels
(which never overlap: a nested one counts once) bound it from below. Printed:
``of wall`` and ``of ops`` = sum of musa kernel time / each bound; at 0.9 or more the
kernels are within 10 % of the busy time. Also printed: the top row of
``key_averages()`` sorted by ``self_device_time_total`` (a convolution for the CNN).
Target: ``of ops`` >= 0.9 for both steps.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import torch_musa  # noqa: F401
from torch_musa.testing.models import SmallCNN, SmallTransformer

DEVICE_KINDS = (torch.autograd.DeviceType.PrivateUse1, torch.autograd.DeviceType.CUDA)


def _step(kind: str):
    torch.manual_seed(0)
    if kind == "cnn (eager)":
        model, x = SmallCNN(), torch.randn(64, 3, 32, 32)
    else:
        model = SmallTransformer(vocab=1000, d_model=128, heads=4, layers=2, seq=64)
        x = torch.randint(0, 1000, (32, 64))
    y = torch.randint(0, 10, (x.shape[0],), device="musa")
    model, x = model.to("musa"), x.to("musa")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    fwd = torch.compile(model) if "compiled" in kind else model

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(fwd(x), y).backward()
        opt.step()
        torch.musa.synchronize()

    for _ in range(3):  # compile + warm-up
        step()
    return step


def measure(kind: str, steps: int) -> dict:
    step = _step(kind)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.MUSA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall_us = (time.perf_counter() - t0) * 1e6
    kernels = [e for e in prof.events() if e.device_type in DEVICE_KINDS]
    kernel_us = sum(k.time_range.elapsed_us() for k in kernels)
    # Top-level ops of every thread (autograd's device thread runs while the caller waits).
    ops_us = sum(e.time_range.elapsed_us() for e in prof.events()
                 if e.device_type not in DEVICE_KINDS and e.cpu_parent is None)
    top = max(prof.key_averages(), key=lambda e: e.self_device_time_total)
    return {"kind": kind, "wall_ms": wall_us / 1e3 / steps, "ops_ms": ops_us / 1e3 / steps,
            "kernel_ms": kernel_us / 1e3 / steps, "of_wall": kernel_us / wall_us,
            "of_ops": kernel_us / ops_us, "kernels_per_step": len(kernels) / steps,
            "top_self_device": top.key}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{'step':<24}{'wall ms':>9}{'ops ms':>9}{'kernels ms':>12}{'of wall':>9}{'of ops':>8}"
          f"{'kernels':>9}  top row (self device time)")
    for kind in ("cnn (eager)", "transformer (compiled)"):
        r = measure(kind, args.steps)
        print(f"{r['kind']:<24}{r['wall_ms']:>9.2f}{r['ops_ms']:>9.2f}{r['kernel_ms']:>12.2f}"
              f"{r['of_wall']:>9.3f}{r['of_ops']:>8.3f}{r['kernels_per_step']:>9.0f}  "
              f"{r['top_self_device']}")


if __name__ == "__main__":
    main()

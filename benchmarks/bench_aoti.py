"""An AOTInductor package of a musa model vs the same model's package for the CPU
device, and vs eager musa: inference of a small transformer encoder and a CNN.

    python benchmarks/bench_aoti.py [--iters 50] [--threads N]

Both packages hold the same CPU code (torch_musa/_inductor/aoti.py); the musa one runs
through the musa runner (zero-copy aliases, musa pool memory, csrc/aten/aoti_runner.cpp).
Medians over ``--iters`` calls after warm-up, the three taking turns call by call.
Prints the ratios; target (host driver): the musa package within 1.05x of the CPU's.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import torch_musa  # noqa: F401
from torch_musa.testing.models import SmallCNN, SmallTransformer


def _workload(kind: str):
    if kind == "transformer":
        model = SmallTransformer(vocab=1000, d_model=128, heads=4, layers=2, seq=64).eval()
        return model, torch.randint(0, 1000, (32, 64))
    return SmallCNN().eval(), torch.randn(64, 3, 32, 32)


def _package(model, x, device: str, folder: str):
    m, xd = model.to(device), x.to(device)
    ep = torch.export.export(m, (xd,))
    path = torch._inductor.aoti_compile_and_package(ep, package_path=f"{folder}/{device}.pt2")
    return torch._inductor.aoti_load_package(path), xd


def _time(fn, x, sync) -> float:
    start = time.perf_counter()
    fn(x)
    sync()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for kind in ("transformer", "cnn"):
        torch.manual_seed(0)
        model, x = _workload(kind)
        with tempfile.TemporaryDirectory() as folder, torch.no_grad():
            runs = {"musa package": _package(model, x, "musa", folder),
                    "cpu package": _package(model, x, "cpu", folder),
                    "eager musa": (model.to("musa"), x.to("musa"))}
            syncs = {"musa package": torch.musa.synchronize, "cpu package": lambda: None,
                     "eager musa": torch.musa.synchronize}
            times = {k: [] for k in runs}
            for i in range(args.iters + 5):
                for name, (fn, xd) in runs.items():
                    t = _time(fn, xd, syncs[name])
                    if i >= 5:
                        times[name].append(t)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        spread = {k: (min(v) * 1e3, max(v) * 1e3) for k, v in times.items()}
        print(f"{kind}: " + ", ".join(f"{k} {med[k]:.3f} ms [{spread[k][0]:.3f}-{spread[k][1]:.3f}]"
                                       for k in med))
        print(f"{kind}: musa package / cpu package = {med['musa package'] / med['cpu package']:.3f}x, "
              f"musa package / eager musa = {med['musa package'] / med['eager musa']:.3f}x")


if __name__ == "__main__":
    main()

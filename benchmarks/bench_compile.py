"""torch.compile (Inductor) on musa vs the same compiled step on the CPU device, and vs
eager musa: a transformer-encoder training step and a CNN training step.

    python benchmarks/bench_compile.py [--iters 30] [--threads N]

Medians over ``--iters`` steps after warm-up, side by side in one process, the three
configurations taking turns step by step (a shared machine's load then falls on each
alike); wall and process CPU time per step. Writes
benchmarks/results/compile.{json,md}. Targets (host driver): musa compiled within
1.05x of CPU compiled, and faster than eager musa.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

import torch
import torch.nn.functional as F

import torch_musa  # noqa: F401
from torch_musa.config import CONFIG
from torch_musa.testing.models import SmallCNN, SmallTransformer

RESULTS = pathlib.Path(__file__).parent / "results"


def _workload(kind: str):
    if kind == "transformer":
        model = SmallTransformer(vocab=1000, d_model=128, heads=4, layers=2, seq=64).eval()
        x = torch.randint(0, 1000, (32, 64))
    else:
        model = SmallCNN().eval()
        x = torch.randn(64, 3, 32, 32)
    return model, x, torch.randint(0, 10, (x.shape[0],))


def _make_step(kind: str, device: str, compiled: bool):
    """One configuration's training step, compiled and warmed up."""
    torch.manual_seed(0)
    model, x, y = _workload(kind)
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    fwd = torch.compile(model) if compiled else model
    sync = torch.musa.synchronize if device == "musa" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(fwd(x), y).backward()
        opt.step()
        sync()

    for _ in range(3):  # compile + warm-up
        step()
    return step


def _time_round_robin(steps: dict, iters: int) -> dict:
    """Median wall and CPU (process) ms per step, the configurations taking turns step
    by step (in a rotating order), so that the load of a shared machine falls on all alike."""
    names = list(steps)
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    for i in range(iters):
        for k in names[i % len(names):] + names[:i % len(names)]:
            t0, c0 = time.perf_counter(), time.process_time()
            steps[k]()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return {k: (statistics.median(wall[k]) * 1e3, statistics.median(cpu[k]) * 1e3) for k in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=pathlib.Path, default=RESULTS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    configs = {"musa_compiled": ("musa", True), "cpu_compiled": ("cpu", True),
               "musa_eager": ("musa", False)}
    for kind in ("transformer", "cnn"):
        steps = {k: _make_step(kind, dev, comp) for k, (dev, comp) in configs.items()}
        ms = _time_round_robin(steps, args.iters)
        med = {k: v[0] for k, v in ms.items()}
        row = {"workload": kind, **{f"{k}_ms": round(v, 3) for k, v in med.items()},
               **{f"{k}_cpu_ms": round(v[1], 3) for k, v in ms.items()},
               "musa_compiled_over_cpu_compiled": round(med["musa_compiled"] / med["cpu_compiled"], 3),
               "eager_over_compiled_musa": round(med["musa_eager"] / med["musa_compiled"], 3)}
        rows.append(row)
        print(f"{kind:12s} musa compiled {med['musa_compiled']:8.2f} ms | cpu compiled "
              f"{med['cpu_compiled']:8.2f} ms | musa eager {med['musa_eager']:8.2f} ms | "
              f"musa/cpu compiled {row['musa_compiled_over_cpu_compiled']:.3f}x (target <= 1.05) | "
              f"compile speed-up over eager musa {row['eager_over_compiled_musa']:.2f}x (target > 1) | "
              f"CPU time ms: " + ", ".join(f"{k} {v[1]:.2f}" for k, v in ms.items()))
    meta = {"driver": CONFIG.driver, "profile": CONFIG.profile.key, "threads": torch.get_num_threads(),
            "iters": args.iters, "torch": torch.__version__, "cores": os.cpu_count(),
            "load_average_1min_at_end": round(os.getloadavg()[0], 2),
            "note": "training steps (forward, backward, SGD), model.eval() so dropout is off; "
                    "median of --iters steps per configuration, the three taking turns step by "
                    "step; ms columns are wall time, *_cpu_ms the process's CPU time per step"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = ["# torch.compile on musa (Inductor, host driver)", "",
             f"`python benchmarks/bench_compile.py --iters {args.iters}`; driver {meta['driver']}, "
             f"profile {meta['profile']}, {meta['threads']} threads. {meta['note']}.", "",
             f"1-minute load average at the end: {meta['load_average_1min_at_end']} on "
             f"{meta['cores']} cores.", "",
             "| workload | musa compiled ms | CPU compiled ms | musa eager ms | musa/CPU compiled | "
             "eager/compiled musa | CPU-time ms (musa compiled / CPU compiled / musa eager) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['musa_compiled_ms']} | {r['cpu_compiled_ms']} | "
                     f"{r['musa_eager_ms']} | {r['musa_compiled_over_cpu_compiled']}x | "
                     f"{r['eager_over_compiled_musa']}x | {r['musa_compiled_cpu_ms']} / "
                     f"{r['cpu_compiled_cpu_ms']} / {r['musa_eager_cpu_ms']} |")
    (args.out / "compile.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'compile.json'} and {args.out / 'compile.md'}")


if __name__ == "__main__":
    main()

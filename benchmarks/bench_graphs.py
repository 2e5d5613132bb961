"""MUSA graph replay against eager launches of the same small ops, side by side in one run.

Each workload is captured once with torch.musa.graph and then timed as a replay
(`g.replay()`) and as the eager Python code that issued it, alternating so
machine noise hits both alike; figures are medians over repeats, per call of
the whole workload, with the work completed (synchronize) inside the timing.
Under the host driver replay skips Python, argument parsing and autograd for
each op; under the cuda driver it is a CUDA graph launch.

    python benchmarks/bench_graphs.py [--repeats 7] [--calls 200] [--threads 1] [--out PREFIX]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

import torch_musa  # noqa: F401
from torch_musa.config import CONFIG


def elementwise_chain(device: str):
    """20 small elementwise ops on a 64x64 tensor: pure launch overhead."""
    x = torch.randn(64, 64, device=device)

    def fn():
        y = x
        for _ in range(5):
            y = torch.relu(y * 1.01 + 0.5) - 0.25
        return y
    return fn, x


def mlp_forward(device: str):
    """A 3-layer MLP forward on a batch of 8 (small matmuls, biases, activations)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128),
                                torch.nn.GELU(), torch.nn.Linear(128, 10)).to(device)
    x = torch.randn(8, 64, device=device)

    def fn():
        with torch.no_grad():
            return model(x)
    return fn, x


def mlp_train_step(device: str):
    """Forward, backward and an SGD step of a small MLP, captured whole."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    x = torch.randn(8, 64, device=device)
    y = torch.randint(0, 10, (8,), device=device)

    def fn():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return fn, x


WORKLOADS = {"elementwise chain (20 ops)": elementwise_chain, "MLP forward": mlp_forward,
             "MLP train step": mlp_train_step}


def count_ops(fn) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))
    with Count():
        fn()
    return Count.n


def timings(device: str, name: str, calls: int, repeats: int) -> tuple[list[float], list[float], int]:
    """Eager and replay times (µs per call) of workload ``name`` on ``device`` ("musa" or "cuda")."""
    dev = torch.musa if device == "musa" else torch.cuda
    fn, _ = WORKLOADS[name](device)
    side = dev.Stream()
    side.wait_stream(dev.current_stream())
    with dev.stream(side):
        for _ in range(3):
            fn()
    dev.current_stream().wait_stream(side)
    g = dev.MUSAGraph() if device == "musa" else dev.CUDAGraph()
    with dev.graph(g):
        fn()
    ops = count_ops(fn)

    def timed(run) -> float:
        dev.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        dev.synchronize()
        return (time.perf_counter() - t0) / calls * 1e6

    eager, replay = [], []
    timed(fn), timed(g.replay)  # warm caches
    for _ in range(repeats):
        eager.append(timed(fn))
        replay.append(timed(g.replay))
    return eager, replay, ops


def bench(name: str, calls: int, repeats: int) -> dict:
    eager, replay, ops = timings("musa", name, calls, repeats)
    e, r = statistics.median(eager), statistics.median(replay)
    row = {"workload": name, "aten_ops": ops, "eager_us": round(e, 1), "replay_us": round(r, 1),
           "speedup": round(e / r, 2)}
    if CONFIG.driver == "cuda":  # native CUDA graphs of the same workload, same run
        ce, cr, _ = timings("cuda", name, calls, repeats)
        row.update(cuda_eager_us=round(statistics.median(ce), 1),
                   cuda_replay_us=round(statistics.median(cr), 1),
                   replay_vs_cuda=round(r / statistics.median(cr), 3))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads (1: launch overhead without thread-pool noise)")
    ap.add_argument("--out", default=os.path.join("benchmarks", "results", f"graphs_{CONFIG.driver}"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = [bench(name, args.calls, args.repeats) for name in WORKLOADS]
    meta = {"driver": CONFIG.driver, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "machine": platform.processor() or platform.machine(), "repeats": args.repeats,
            "calls": args.calls,
            "command": f"python benchmarks/bench_graphs.py --threads {args.threads}"}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=2)
    lines = [f"# MUSA graph replay vs eager launch ({CONFIG.driver} driver)", "",
             f"torch {meta['torch']}, {meta['threads']} threads; median of {args.repeats} repeats "
             f"of {args.calls} calls; per call of the whole workload, work completed.", "",
             "| workload | aten ops | eager (µs) | replay (µs) | eager / replay |"
             + (" native CUDA eager (µs) | native CUDA replay (µs) | musa replay / CUDA replay |"
                if CONFIG.driver == "cuda" else ""),
             "|---|---:|---:|---:|---:|" + ("---:|---:|---:|" if CONFIG.driver == "cuda" else "")]
    for r in rows:
        line = (f"| {r['workload']} | {r['aten_ops']} | {r['eager_us']} | {r['replay_us']} | "
                f"{r['speedup']}× |")
        if "cuda_replay_us" in r:
            line += f" {r['cuda_eager_us']} | {r['cuda_replay_us']} | {r['replay_vs_cuda']}× |"
        lines.append(line)
    with open(args.out + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Training-step time with the debugging tools on and off, side by side.

Modes, per model (the transformer LM and the CNN of examples/debug_tools.py):
  off                 plain training step
  dispatch only       an empty TorchDispatchMode: the floor any dispatch-level
                      tool pays (Python entered once per aten op)
  nan                 NanInfTracker as it runs by default (on musa: checked in the
                      C++ op path, no Python per op; elsewhere: the dispatch mode)
  nan dispatch        NanInfTracker(backend="python"): the dispatch mode on every
                      device (device-side flags, one read per step) - the musa
                      path before the native check
  nan+modules         NanInfTracker with open_module_tracker (module paths)
  nan sync/op         NanInfTracker(check_every=1): a host read after every op,
                      the way torch_musa's tracker checks
  compare             CompareWithCPU (every op re-run on CPU and compared)

Rounds alternate between the modes, so machine noise hits them alike; each
figure is the median step time over rounds. The target for "nan" is <= 1.2x.

    python benchmarks/bench_debug_tools.py [--device musa] [--rounds 5] [--steps 3]
        [--size small|medium|large|xl] [--models lm,cnn] [--no-compare] [--clock wall|cpu]
        [--json out.json]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import time

import sys
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import torch_musa  # noqa: F401
except Exception:  # noqa: BLE001 - e.g. a CUDA machine without the musa build: the tools alone
    _root = os.path.join(_HERE, "..", "torch_musa")
    for _name, _path in (("torch_musa", _root), ("torch_musa.utils", os.path.join(_root, "utils"))):
        _m = types.ModuleType(_name)
        _m.__path__ = [_path]
        sys.modules[_name] = _m
from torch_musa.utils.compare_tool import CompareWithCPU, NanInfTracker, open_module_tracker  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "debug_tools_example", os.path.join(_HERE, "..", "examples", "debug_tools.py"))
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)

SIZES = {
    # (LM d, layers, batch, seq), (CNN batch, image side, width)
    "small": ((64, 2, 4, 32), (16, 16, 16)),
    "medium": ((256, 2, 8, 64), (32, 32, 32)),
    "large": ((1024, 4, 16, 256), (256, 128, 64)),       # GPU-sized
    "xl": ((1024, 4, 32, 512), (512, 128, 64)),
}


def build(model: str, size: str, device: str):
    (d, layers, batch, seq), (cb, side, width) = SIZES[size]
    torch.manual_seed(0)
    if model == "lm":
        m = ex.TinyLM(vocab=1000, d=d, heads=4, n_layers=layers).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        tokens = torch.randint(0, 1000, (batch, seq + 1), device=device)
        return m, (lambda: ex.lm_step(m, opt, tokens))
    m = ex.CNN(width=width, side=side).to(device)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(cb, 3, side, side, device=device)
    y = torch.randint(0, 10, (cb,), device=device)
    return m, (lambda: ex.cnn_step(m, opt, x, y))


class _Empty(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _sync(device):
    mod = getattr(torch, torch.device(device).type, None)
    if mod is not None and hasattr(mod, "synchronize"):
        mod.synchronize()


CLOCK = time.perf_counter


def time_mode(mode: str, model, step, steps: int, device: str) -> float:
    """Seconds per step (mean over `steps`) with the tool of `mode` around them."""
    handle = open_module_tracker(model) if mode in ("nan+modules",) else None
    if mode == "off":
        tool = contextlib.nullcontext()
    elif mode == "dispatch only":
        tool = _Empty()
    elif mode in ("nan", "nan+modules"):
        tool = NanInfTracker(verbose=False)
    elif mode == "nan dispatch":
        tool = NanInfTracker(verbose=False, backend="python")
    elif mode == "nan sync/op":
        tool = NanInfTracker(check_every=1, verbose=False)
    elif mode == "compare":
        tool = CompareWithCPU(verbose=False, max_printed=0, plot=False)
    else:
        raise ValueError(mode)
    try:
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            with tool as t:
                _sync(device)
                t0 = CLOCK()
                for _ in range(steps):
                    step()
                    if hasattr(t, "step"):
                        t.step()
                _sync(device)
                dt = CLOCK() - t0
    finally:
        if handle is not None:
            handle.remove()
    return dt / steps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="musa")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="steps per round and mode")
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--models", default="lm,cnn")
    ap.add_argument("--no-compare", action="store_true", help="leave CompareWithCPU out")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: keep)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this process's CPU time (all threads) - steadier on a shared "
                         "machine for a host-executed device such as musa; wall for GPUs")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    modes = ["off", "dispatch only", "nan", "nan dispatch", "nan+modules", "nan sync/op"] + (
        [] if args.no_compare else ["compare"])
    results = {}
    for name in args.models.split(","):
        model, step = build(name, args.size, args.device)
        for _ in range(2):                      # warm up caches and allocators
            step()
        times = {m: [] for m in modes}
        for r in range(args.rounds):
            order = modes if r % 2 == 0 else modes[::-1]
            for m in order:
                steps = args.steps if m != "compare" else 1
                times[m].append(time_mode(m, model, step, steps, args.device))
        results[name] = {m: statistics.median(v) for m, v in times.items()}
        results[name]["_spread"] = {m: (min(v), max(v)) for m, v in times.items()}

    print(f"\ndevice={args.device} size={args.size} threads={torch.get_num_threads()} "
          f"rounds={args.rounds} steps/round={args.steps} clock={args.clock}  "
          "(median step time; ratio to off)")
    head = f"{'mode':<14}" + "".join(f"{n + ' ms':>12}{'ratio':>8}" for n in results)
    print(head)
    print("-" * len(head))
    for m in modes:
        row = f"{m:<14}"
        for n, res in results.items():
            row += f"{res[m] * 1e3:>12.2f}{res[m] / res['off']:>7.2f}x"
        print(row)
    ok = all(res["nan"] / res["off"] <= 1.2 for res in results.values())
    print(f"\nNanInfTracker target (<= 1.2x): {'met' if ok else 'NOT met'} "
          + ", ".join(f"{n} {res['nan'] / res['off']:.2f}x" for n, res in results.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({n: {m: v for m, v in res.items() if not m.startswith("_")}
                       for n, res in results.items()}, f, indent=2)


if __name__ == "__main__":
    main()

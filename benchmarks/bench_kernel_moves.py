"""What musa adds to an op's host time per tensor: list ops and compiled graphs' moves.

A musa op hands its kernel aliases of its tensors (the kernel device's tensors over the
same memory) and maps the results back; a compiled graph's arguments and results cross
the same way, in one call each (``_C._to_kernel_args``, ``_C._from_kernel_outputs``).
This times, per call with the queue drained first (the host's time, not the device's):

- fused AdamW (``_fused_adamw_``, five lists) and ``_foreach_add_`` over n tensors, on
  musa, on the kernel device itself (native cuda, or the CPU under the host driver), and
  on aliases of the musa tensors handed straight to the kernel device's op: musa minus
  alias is the wrapper's cost, alias minus native what the aliases cost the kernel;
- a compiled graph's 300 results coming back as musa tensors (fresh kernel-device
  tensors, made in the allocator's memory as a graph's buffers are), and 300 musa
  arguments going to the kernel device.

    TORCH_MUSA_DRIVER=cuda python benchmarks/bench_kernel_moves.py --out DIR   # a GPU
    python benchmarks/bench_kernel_moves.py --quick --out DIR                  # host driver

Writes DIR/kernel_moves.json and DIR/kernel_moves.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time

import torch

import torch_musa
from torch_musa import _C


def kernel_device() -> str:
    return "cuda" if _C._driver_name() == "cuda" else "cpu"


def sync() -> None:
    torch.musa.synchronize()
    if kernel_device() == "cuda":
        torch.cuda.synchronize()


def one_call_us(fn, reps: int, setup=None) -> float:
    """Median host time of one call, each started on a drained queue; with ``setup``,
    ``fn(setup())``, the setup and the freeing of fn's result untimed."""
    times = []
    for _ in range(reps):
        arg = (setup(),) if setup else ()
        sync()
        t0 = time.perf_counter()
        out = fn(*arg)
        times.append(time.perf_counter() - t0)
        del out, arg
    sync()
    return statistics.median(times) * 1e6


def gpt2_shapes() -> list[tuple[int, ...]]:
    """GPT-2 small's 148 parameter tensors."""
    layer = [(768,), (768,), (768, 2304), (2304,), (768, 768), (768,), (768,), (768,),
             (768, 3072), (3072,), (3072, 768), (768,)]
    return [(50257, 768), (1024, 768)] + layer * 12 + [(768,), (768,)]


def optimizer_lists(side: str, shapes) -> list[list[torch.Tensor]]:
    """params, grads, exp_avgs, exp_avg_sqs, state steps: on ``side``'s device, or for
    "alias" the kernel device's aliases of musa tensors."""
    device = {"musa": "musa", "alias": "musa"}.get(side, side)
    g = torch.Generator().manual_seed(0)
    lists = [[torch.randn(s, generator=g).to(device) for s in shapes] for _ in range(4)]
    lists.append([torch.zeros((), device=device) for _ in shapes])
    if side == "alias":
        lists = [[_C._kernel_alias(t) for t in ts] for ts in lists]
    return lists


def fused_adamw(lists):
    p, g, m, v, steps = lists
    return lambda: torch._fused_adamw_(p, g, m, v, [], steps, lr=1e-3, beta1=0.9, beta2=0.999,
                                       weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)


def foreach_add(lists):
    return lambda: torch._foreach_add_(lists[4], 1)


def list_op_rows(cases, rounds: int, reps: int) -> list[dict]:
    sides = ("musa", "alias", kernel_device())
    rows = []
    for label, shapes in cases:
        lists = {side: optimizer_lists(side, shapes) for side in sides}
        for op_name, make in (("fused AdamW", fused_adamw), ("foreach add_", foreach_add)):
            fns = {side: make(ls) for side, ls in lists.items()}
            for fn in fns.values():
                for _ in range(3):
                    fn()
            times = {side: [] for side in sides}
            for r in range(rounds):  # alternating order, round by round
                for side in sides if r % 2 == 0 else reversed(sides):
                    times[side].append(one_call_us(fns[side], reps))
            med = {side: statistics.median(ts) for side, ts in times.items()}
            tensors = len(shapes) * (5 if op_name == "fused AdamW" else 1)
            row = {"name": f"{op_name}, {label}", "tensors": tensors,
                   **{f"{side}_us": m for side, m in med.items()},
                   "ratio": med["musa"] / med[kernel_device()],
                   "wrapper_us_per_tensor": (med["musa"] - med["alias"]) / tensors,
                   "rounds": times}
            rows.append(row)
            print_row(row)
        del lists
    return rows


def move_rows(rounds: int, reps: int, n: int = 300) -> list[dict]:
    kd = kernel_device()
    # The host driver's kernels allocate results in musa memory only inside an op;
    # unified memory stands in for a compiled graph's buffers there.
    in_pool = contextlib.nullcontext if kd == "cuda" else torch.musa.use_unified_cpu_allocator
    args = [torch.empty(64, device="musa") for _ in range(n)]

    def make():
        with in_pool():
            return [torch.empty(64, device=kd) for _ in range(n)]

    # The results are made and freed outside the timed call: freeing n kernel-device
    # tensors and n musa ones costs differently, and a difference of two timings that
    # each include it came out negative on a lent H100.
    fns = {"results": (lambda outs: _C._from_kernel_outputs(outs, -1), make),
           "arguments": (lambda a: _C._to_kernel_args(a), lambda: list(args))}
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, (fn, setup) in fns.items():
            times[k].append(one_call_us(fn, reps, setup))
    med = {k: statistics.median(ts) for k, ts in times.items()}
    rows = [{"name": f"compiled graph: {n} results back to musa", "tensors": n,
             "musa_us": med["results"], "us_per_tensor": med["results"] / n},
            {"name": f"compiled graph: {n} arguments to the kernel device", "tensors": n,
             "musa_us": med["arguments"], "us_per_tensor": med["arguments"] / n}]
    for r in rows:
        print(f"{r['name']:<44} {r['musa_us']:>10.1f} µs  {r['us_per_tensor']:.3f} µs per tensor", flush=True)
    return rows


def print_row(r: dict) -> None:
    kd = kernel_device()
    print(f"{r['name']:<44} musa {r['musa_us']:>9.1f}  alias {r['alias_us']:>9.1f}  {kd} {r[kd + '_us']:>9.1f}"
          f"  {r['ratio']:.2f}x  wrapper {r['wrapper_us_per_tensor']:.3f} µs/tensor", flush=True)


def write(out: str, result: dict) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "kernel_moves.json"), "w") as f:
        json.dump(result, f, indent=2)
    kd = result["kernel_device"]
    lines = [f"# musa's host cost per tensor ({result['driver']} driver, {result['machine']})", "",
             f"torch {result['torch']}; host time of one call on a drained queue, median of "
             f"{result['rounds']} rounds × {result['reps']} calls. alias: the {kd} op called on "
             "aliases of the musa tensors.", "",
             f"| op | tensors | musa µs | alias µs | {kd} µs | musa/{kd} | musa − alias, µs per tensor |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["list_ops"]:
        lines.append(f"| {r['name']} | {r['tensors']} | {r['musa_us']:.1f} | {r['alias_us']:.1f} | "
                     f"{r[kd + '_us']:.1f} | {r['ratio']:.2f} | {r['wrapper_us_per_tensor']:.3f} |")
    lines += ["", "| compiled graph's move | tensors | µs | µs per tensor |", "|---|---:|---:|---:|"]
    for r in result["moves"]:
        lines.append(f"| {r['name']} | {r['tensors']} | {r['musa_us']:.1f} | {r['us_per_tensor']:.3f} |")
    with open(os.path.join(out, "kernel_moves.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="small lists, few calls (a smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.reps = 2, 5
    tiny = [(64,)]
    cases = [("16 x 64", tiny * 16), ("148 x 64", tiny * 148)]
    if not args.quick:
        cases.append(("592 x 64", tiny * 592))
        if kernel_device() == "cuda":  # GPT-2's 124M parameters: slow on the host's CPU
            cases.append(("GPT-2 small's 148", gpt2_shapes()))
    result = {"driver": _C._driver_name(), "kernel_device": kernel_device(), "torch": torch.__version__,
              "machine": torch.cuda.get_device_name() if kernel_device() == "cuda" else platform.processor()
              or platform.machine(), "rounds": args.rounds, "reps": args.reps,
              "torch_musa": getattr(torch_musa, "__version__", "")}
    result["list_ops"] = list_op_rows(cases, args.rounds, args.reps)
    result["moves"] = move_rows(args.rounds, args.reps)
    write(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

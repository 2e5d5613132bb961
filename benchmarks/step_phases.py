"""A training step's host issue time phase by phase (forward, backward, optimizer,
zero_grad), on two devices side by side: where musa's extra host time per step lies.

Each step starts on an idle queue (the device is drained after every step), so a phase's
time is the host's time to issue it, not a wait for the device; ``--back-to-back`` drains
only before the first step, as a training loop runs (a phase then includes any wait for
the device's queue). The step is
bench_cuda_driver.py's GPT-2 step; each device runs in its own process (native cuda
without torch_musa, as that benchmark's worker).

    TORCH_MUSA_DRIVER=cuda python benchmarks/step_phases.py --out DIR   # musa against cuda
    python benchmarks/step_phases.py --devices musa,cpu --small --out DIR  # the host driver

``--compiled`` puts the model under ``torch.compile``; ``--cprofile`` also writes each
side's cProfile table; ``--ops`` compares the two sides' op calls in one profiled step
(each op with its caller, and its own CPU time), the synchronisations each side's sync
debug mode reports over three steps, and the allocator's counters per step: what
found the attention ops still served by the boxed fallback and the empty copies
reported as blocking. Writes DIR/step_phases.json and DIR/step_phases.md
(``step_phases_compiled_back_to_back.*`` and the like with the options): per phase the
median over ``--steps`` steps on each side, the ratio and the difference.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PHASES = ("forward", "backward", "optimizer", "zero_grad", "step")
#: --small: a GPT-2 a host CPU trains in milliseconds (smoke tests, the host driver).
SMALL = {"batch": 2, "seq": 64, "n_layer": 2, "config": {"n_embd": 64, "n_head": 4, "vocab_size": 512}}


def worker(device: str, case: str, steps: int, small: bool, back_to_back: bool = False,
           compiled: bool = False, cprofile: str | None = None, ops: str | None = None) -> int:
    """Prints one JSON line: each phase's median and mean microseconds over ``steps`` steps
    (the means add up to the step's, the medians need not). ``cprofile``: then writes
    cProfile's functions by own time over five more steps there (the Python side of a
    step, and each C++ entry's time as one call: what torch.profiler's op rows leave out)."""
    if device != "musa":
        sys.modules["torch_musa"] = None  # native: no PrivateUse1 backend in this process
    sys.path.insert(0, HERE)
    from bench_cuda_driver import TRAIN_CASES, gpt2_step, sync

    cfg = SMALL if small else {**TRAIN_CASES[case], "config": {}}
    step = gpt2_step(device, cfg["batch"], cfg["seq"], compiled, n_layer=cfg["n_layer"], **cfg["config"])
    times = {p: [] for p in PHASES}
    marks = []

    def mark(phase):
        marks.append((phase, time.perf_counter()))

    for i in range(10 + steps):  # the first ten warm up (allocator, kernel choice)
        if not back_to_back or i == 0:
            sync(device)
        marks.clear()
        mark("start")
        step(mark)
        if i >= 10:
            for (_, t0), (phase, t1) in zip(marks, marks[1:]):
                times[phase].append((t1 - t0) * 1e6)
            times["step"].append((marks[-1][1] - marks[0][1]) * 1e6)
    sync(device)
    if cprofile:
        write_cprofile(step, lambda: sync(device), device, cprofile)
    if ops:
        with open(ops, "w") as f:
            json.dump(op_census(step, device, lambda: sync(device)), f)
    print(json.dumps({"median": {p: statistics.median(v) for p, v in times.items()},
                      "mean": {p: statistics.fmean(v) for p, v in times.items()}}), flush=True)
    return 0


def write_cprofile(step, sync, device: str, path: str, steps: int = 5, rows: int = 45) -> None:
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    sync()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(rows)
    with open(path, "w") as f:
        f.write(f"# {device}: cProfile over {steps} steps, by own time\n{text.getvalue()}")


ALLOCATOR_COUNTERS = ("allocation.all.allocated", "segment.all.allocated", "num_alloc_retries",
                      "num_device_alloc", "num_sync_all_streams")


def op_census(step, device: str, sync, steps: int = 3) -> dict:
    """One profiled step's op calls ("op <- caller": count) and each op's own CPU time;
    the synchronisations the sync debug modes report over ``steps`` steps (musa's and, for
    CUDA memory, CUDA's; None where the device has no such mode); the allocator's
    counters per step (None for the CPU device)."""
    import collections
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    # CUDA's mode watches CUDA memory: native cuda's, and musa's under the cuda driver;
    # a CPU-device process on a GPU machine has none to watch.
    modes = ([torch.musa] if device == "musa" else []) + \
        ([torch.cuda] if device in ("musa", "cuda") and torch.cuda.is_available() else [])
    memory = {"musa": getattr(torch, "musa", None), "cuda": torch.cuda}.get(device)
    stats = memory.memory_stats if memory is not None else None
    sync()
    before = stats() if stats else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for m in modes:
            m.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                step()
        finally:
            for m in modes:
                m.set_sync_debug_mode(0)
    sync()
    after = stats() if stats else None
    syncs = collections.Counter(str(w.message).split(" (Triggered internally")[0] for w in caught
                                if "synchroniz" in str(w.message) and "prototype" not in str(w.message))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        sync()
    calls, own = collections.Counter(), collections.Counter()
    for e in prof.events():
        calls[f"{e.name} <- {e.cpu_parent.name if e.cpu_parent else '-'}"] += 1
        own[e.name] += e.self_cpu_time_total
    return {"calls": dict(calls), "self_us": dict(own),
            "syncs_per_step": {k: v / steps for k, v in syncs.items()} if modes else None,
            "allocator_per_step": {k: (after.get(k, 0) - before.get(k, 0)) / steps
                                   for k in ALLOCATOR_COUNTERS} if stats else None}


def compare_ops(sides: dict, devices: list[str], rows: int = 30) -> dict:
    """The calls whose counts differ and the ops whose own CPU time differs most."""
    a, b = devices
    ca, cb = sides[a]["calls"], sides[b]["calls"]
    calls = sorted(({"call": k, a: ca.get(k, 0), b: cb.get(k, 0), "diff": ca.get(k, 0) - cb.get(k, 0)}
                    for k in set(ca) | set(cb) if ca.get(k, 0) != cb.get(k, 0)),
                   key=lambda r: (-abs(r["diff"]), r["call"]))
    sa, sb = sides[a]["self_us"], sides[b]["self_us"]
    own = sorted(({"op": k, a: sa.get(k, 0.0), b: sb.get(k, 0.0), "diff_us": sa.get(k, 0.0) - sb.get(k, 0.0)}
                  for k in set(sa) | set(sb)), key=lambda r: (-abs(r["diff_us"]), r["op"]))
    return {"calls": calls[:rows], "self_us": own[:rows],
            "self_us_total": {d: sum(sides[d]["self_us"].values()) for d in devices},
            "syncs_per_step": {d: sides[d]["syncs_per_step"] for d in devices},
            "allocator_per_step": {d: sides[d]["allocator_per_step"] for d in devices}}


def ops_markdown(name: str, result: dict, devices: list[str]) -> str:
    a, b = devices
    lines = [f"# {name}: one step's op calls, {a} against {b}", "",
             "One profiled step per side (`benchmarks/step_phases.py --ops`); synchronisations "
             "and allocator counters per step over three steps.", ""]
    for d in devices:
        syncs = result["syncs_per_step"][d]
        told = "no sync debug mode" if syncs is None else \
            (", ".join(f"{v:g} × {k}" for k, v in syncs.items()) or "none")
        lines.append(f"- {d}: own CPU time {result['self_us_total'][d]:.0f} µs; "
                     f"synchronisations reported per step: {told}; allocator per step: "
                     + ("n/a" if result["allocator_per_step"][d] is None else
                        ", ".join(f"{k} {v:g}" for k, v in result["allocator_per_step"][d].items())))
    lines += ["", f"| calls that differ (op <- caller) | {a} | {b} | {a} − {b} |", "|---|---:|---:|---:|"]
    lines += [f"| `{r['call']}` | {r[a]} | {r[b]} | {r['diff']:+d} |" for r in result["calls"]]
    lines += ["", f"| own CPU time | {a} µs | {b} µs | {a} − {b} µs |", "|---|---:|---:|---:|"]
    lines += [f"| `{r['op']}` | {r[a]:.0f} | {r[b]:.0f} | {r['diff_us']:+.0f} |" for r in result["self_us"]]
    return "\n".join(lines) + "\n"


def measure(device: str, case: str, steps: int, small: bool, back_to_back: bool = False,
            compiled: bool = False, cprofile: str | None = None, ops: str | None = None) -> dict:
    env = dict(os.environ)
    if device != "musa":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", device, "--case", case,
           "--steps", str(steps)] + (["--small"] if small else []) + (["--back-to-back"] if back_to_back else [])
    cmd += (["--compiled"] if compiled else []) + (["--cprofile-to", cprofile] if cprofile else [])
    cmd += ["--ops-to", ops] if ops else []
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"the {device} worker failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def compare(sides: dict, devices: list[str]) -> list[dict]:
    """Per phase the medians of both sides, their ratio and difference, and the means."""
    a, b = devices
    ma, mb = sides[a]["median"], sides[b]["median"]
    return [{"phase": p, f"{a}_us": ma[p], f"{b}_us": mb[p], "ratio": ma[p] / mb[p], "diff_us": ma[p] - mb[p],
             f"{a}_mean_us": sides[a]["mean"][p], f"{b}_mean_us": sides[b]["mean"][p]} for p in PHASES]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--case", default="gpt2-2layer-b4x256", help="a bench_cuda_driver.py training case")
    ap.add_argument("--devices", default="musa,cuda", help="two devices, the first against the second")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--small", action="store_true", help="a tiny GPT-2 instead of the case's")
    ap.add_argument("--back-to-back", action="store_true",
                    help="drain the queue only before the first step, not before each")
    ap.add_argument("--compiled", action="store_true", help="the model under torch.compile")
    ap.add_argument("--cprofile", action="store_true",
                    help="also write each side's cProfile table (functions by own time over five steps) "
                         "to --out's <stem>_cprofile_<device>.txt")
    ap.add_argument("--ops", action="store_true",
                    help="also compare one step's op calls, reported synchronisations and allocator "
                         "counters: --out's <stem>_ops.md and .json")
    ap.add_argument("--cprofile-to", help=argparse.SUPPRESS)  # the worker's
    ap.add_argument("--ops-to", help=argparse.SUPPRESS)  # the worker's
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.case, args.steps, args.small, args.back_to_back,
                      args.compiled, args.cprofile_to, args.ops_to)
    devices = args.devices.split(",")
    if len(devices) != 2:
        ap.error("--devices takes two devices, e.g. musa,cuda")
    stem = "step_phases" + ("_compiled" if args.compiled else "") + ("_back_to_back" if args.back_to_back else "")
    os.makedirs(args.out, exist_ok=True)
    sides = {}
    for d in devices:
        print(f"{d}: {args.steps} steps ...", flush=True)
        prof = os.path.abspath(os.path.join(args.out, f"{stem}_cprofile_{d}.txt")) if args.cprofile else None
        census = os.path.abspath(os.path.join(args.out, f"{stem}_ops_{d}.json")) if args.ops else None
        sides[d] = measure(d, args.case, args.steps, args.small, args.back_to_back, args.compiled, prof, census)
    rows = compare(sides, devices)
    a, b = devices
    name = ("small GPT-2" if args.small else args.case) + (" compiled" if args.compiled else "")
    lines = [f"# {name}: host issue time per phase, {a} against {b}", "",
             f"Medians of {args.steps} steps, "
             + ("run back to back" if args.back_to_back else "each started on an idle queue")
             + " (`benchmarks/step_phases.py`).", "",
             f"| phase | {a} µs | {b} µs | {a}/{b} | {a} − {b} µs |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['phase']} | {r[f'{a}_us']:.0f} | {r[f'{b}_us']:.0f} | {r['ratio']:.3f} | "
                     f"{r['diff_us']:+.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, stem + ".md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump({"case": name, "devices": devices, "steps": args.steps, "back_to_back": args.back_to_back,
                   "compiled": args.compiled, "rows": rows}, f, indent=1)
    if args.ops:
        censuses = {}
        for d in devices:
            path = os.path.join(args.out, f"{stem}_ops_{d}.json")
            with open(path) as f:
                censuses[d] = json.load(f)
            os.remove(path)  # folded into the comparison below
        result = compare_ops(censuses, devices)
        text = ops_markdown(name, result, devices)
        print(text)
        with open(os.path.join(args.out, stem + "_ops.md"), "w") as f:
            f.write(text)
        with open(os.path.join(args.out, stem + "_ops.json"), "w") as f:
            json.dump({"case": name, "devices": devices, **result}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

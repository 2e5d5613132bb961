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
side's cProfile table. Writes DIR/step_phases.json and DIR/step_phases.md
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
           compiled: bool = False, cprofile: str | None = None) -> int:
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


def measure(device: str, case: str, steps: int, small: bool, back_to_back: bool = False,
            compiled: bool = False, cprofile: str | None = None) -> dict:
    env = dict(os.environ)
    if device != "musa":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", device, "--case", case,
           "--steps", str(steps)] + (["--small"] if small else []) + (["--back-to-back"] if back_to_back else [])
    cmd += (["--compiled"] if compiled else []) + (["--cprofile-to", cprofile] if cprofile else [])
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
    ap.add_argument("--cprofile-to", help=argparse.SUPPRESS)  # the worker's
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.case, args.steps, args.small, args.back_to_back,
                      args.compiled, args.cprofile_to)
    devices = args.devices.split(",")
    if len(devices) != 2:
        ap.error("--devices takes two devices, e.g. musa,cuda")
    stem = "step_phases" + ("_compiled" if args.compiled else "") + ("_back_to_back" if args.back_to_back else "")
    os.makedirs(args.out, exist_ok=True)
    sides = {}
    for d in devices:
        print(f"{d}: {args.steps} steps ...", flush=True)
        prof = os.path.abspath(os.path.join(args.out, f"{stem}_cprofile_{d}.txt")) if args.cprofile else None
        sides[d] = measure(d, args.case, args.steps, args.small, args.back_to_back, args.compiled, prof)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())

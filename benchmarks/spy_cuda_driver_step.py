"""Where musa's extra host time per training step goes, frame by frame: py-spy's
native-stack samples of the same GPT-2 step on musa (cuda driver) and on native cuda.

torch.profiler sees ops only; on the host-bound steps of bench_cuda_driver.py the CPU
time it gives the ops sums to the same on both sides while musa's step takes longer
to issue (docs/PERFORMANCE.md), so the difference lies between ops. Sampling every
thread's native and Python stacks sees it wherever it is.

    TORCH_MUSA_DRIVER=cuda python benchmarks/spy_cuda_driver_step.py --out DIR
    STAGES="build spy" bash scripts/gpu_run.sh        # the same on the lent machine

Needs py-spy (scripts/gpu_run.sh installs it from .whl/). Each side runs in its own
process (native cuda without torch_musa, as bench_cuda_driver.py's worker) under
``py-spy record --native``. Writes DIR/spy_step_{musa,cuda}.txt (collapsed stacks)
and DIR/spy_step.md, DIR/spy_step.json: per frame, thread time per step on each side
and the difference, largest first. ``--devices musa,cpu`` runs the same on the host
driver against the CPU device (a smoke test).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RATE = 200  # samples per second


def worker(device: str, case: str, seconds: float) -> int:
    """Runs the case's step for ``seconds`` after a warm-up; prints steps and seconds."""
    if device != "musa":
        sys.modules["torch_musa"] = None  # as bench_cuda_driver's native worker
    sys.path.insert(0, HERE)
    from bench_cuda_driver import TRAIN_CASES, gpt2_step, sync

    cfg = TRAIN_CASES[case]
    step = gpt2_step(device, cfg["batch"], cfg["seq"], n_layer=cfg["n_layer"])
    for _ in range(3):
        step()
    sync(device)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _sampled_steps(step, 5)
        n += 5
    sync(device)
    print(json.dumps({"steps": n, "seconds": time.perf_counter() - t0}), flush=True)
    return 0


def _sampled_steps(step, n: int) -> None:
    """The loop whose samples count (its name marks them in the stacks)."""
    for _ in range(n):
        step()


def py_spy() -> str:
    found = shutil.which("py-spy") or os.path.join(sysconfig.get_path("scripts"), "py-spy")
    if not os.path.exists(found):
        raise SystemExit("py-spy not found: pip install py-spy (scripts/gpu_run.sh installs it from .whl/)")
    return found


def record(device: str, case: str, seconds: float, out: str) -> dict:
    env = dict(os.environ)
    if device != "musa":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    cmd = [py_spy(), "record", "--native", "--threads", "-r", str(RATE), "-f", "raw", "-o", out, "--",
           sys.executable, os.path.abspath(__file__), "--worker", device, "--case", case,
           "--seconds", str(seconds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"py-spy on {device} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


_LOCATION = re.compile(r" \((?:[^()]*/)?([^()/]*?)(?::\d+)?\)$")
_ADDRESS = re.compile(r"^0x[0-9a-f]+ ")
_THREAD = re.compile(r"^thread \(\d+\)")
# Leaf frames of a thread that waits (for work, a lock, the device): not host work.
_WAITS = ("pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "__futex", "futex_",
          "sem_wait", "sem_timedwait", "epoll_wait", "poll ", "nanosleep", "condition_variable::wait")


def _frame_key(frame: str) -> str:
    """A frame without what differs between runs: line numbers, folders, addresses, thread ids."""
    frame = _LOCATION.sub(lambda m: f" ({m.group(1)})", frame)
    return _THREAD.sub("thread", _ADDRESS.sub("? ", frame))


def frames_per_step(path: str, steps: int) -> tuple[dict, float]:
    """Inclusive busy thread-seconds per step of every frame (function name and file),
    and their total: the step loop's thread and every other thread (the autograd
    engine's device threads), without samples of a thread that waits."""
    inclusive = collections.Counter()
    total = 0
    for line in open(path):
        stack, _, count = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        if frames[0].endswith(": MainThread") and not any("_sampled_steps" in f for f in frames):
            continue  # the main thread outside the timed loop (imports, warm-up, shutdown)
        # a thread that waits, or autograd's device thread idle between backwards
        if any(w in frames[-1] for w in _WAITS) or any("ReadyQueue::pop" in f for f in frames):
            continue
        total += n
        for key in {_frame_key(f) for f in frames}:
            inclusive[key] += n
    per_step = 1.0 / RATE / steps
    return {k: v * per_step for k, v in inclusive.items()}, total * per_step


def compare(sides: dict, devices: list[str]) -> list[dict]:
    a, b = devices
    keys = set(sides[a]["frames"]) | set(sides[b]["frames"])
    rows = [{"frame": k, f"{a}_ms": sides[a]["frames"].get(k, 0.0) * 1e3,
             f"{b}_ms": sides[b]["frames"].get(k, 0.0) * 1e3} for k in keys]
    for r in rows:
        r["diff_ms"] = r[f"{a}_ms"] - r[f"{b}_ms"]
    return sorted((r for r in rows if abs(r["diff_ms"]) >= 0.05), key=lambda r: -abs(r["diff_ms"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--case", default="gpt2-2layer-b4x256")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--devices", default="musa,cuda", help="two devices, the first against the second")
    ap.add_argument("--rows", type=int, default=60)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.worker, a.case, a.seconds)
    devices = a.devices.split(",")
    if len(devices) != 2:
        ap.error("--devices takes two devices, e.g. musa,cuda")
    os.makedirs(a.out, exist_ok=True)
    sides = {}
    for d in devices:
        path = os.path.join(a.out, f"spy_step_{d}.txt")
        print(f"sampling {d} for {a.seconds:g} s ...", flush=True)
        run = record(d, a.case, a.seconds, path)
        frames, total = frames_per_step(path, run["steps"])
        sides[d] = {"steps": run["steps"], "step_ms": run["seconds"] / run["steps"] * 1e3,
                    "thread_ms_per_step": total * 1e3, "frames": frames}
        print(f"  {d}: {sides[d]['step_ms']:.2f} ms/step, {sides[d]['thread_ms_per_step']:.2f} ms of "
              f"busy thread time per step", flush=True)
    rows = compare(sides, devices)
    x, y = devices
    head = (f"# {a.case}: {x} against {y}, py-spy --native, {RATE} Hz\n\n"
            + "".join(f"- {d}: {sides[d]['step_ms']:.2f} ms/step over {sides[d]['steps']} steps, "
                      f"{sides[d]['thread_ms_per_step']:.2f} ms of busy thread time per step\n" for d in devices)
            + f"\nInclusive busy thread time per step of each frame; frames differing by 0.05 ms or more, "
              f"largest difference first.\n\n| {x} − {y} ms | {x} ms | {y} ms | frame |\n|---:|---:|---:|---|\n")
    table = "".join(f"| {r['diff_ms']:+.2f} | {r[f'{x}_ms']:.2f} | {r[f'{y}_ms']:.2f} | "
                    f"`{r['frame'][:140].replace('|', '/')}` |\n" for r in rows[:a.rows])
    with open(os.path.join(a.out, "spy_step.md"), "w") as f:
        f.write(head + table)
    with open(os.path.join(a.out, "spy_step.json"), "w") as f:
        json.dump({"case": a.case, "devices": devices, "rate_hz": RATE,
                   "sides": {d: {k: v for k, v in s.items() if k != "frames"} for d, s in sides.items()},
                   "rows": rows}, f, indent=1)
    print(head + table[: 6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())

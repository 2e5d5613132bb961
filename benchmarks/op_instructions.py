"""What a musa op call costs the host, in instructions: musa (host driver) against the CPU
device, counted by valgrind's callgrind, so the figure is the same on a quiet or a busy
machine (wall-clock ratios on shared hosts wander by ±10 %, more than a wrapper change
moves them).

Each op runs in its own process per device, 1,302 calls over three alternating shapes (in
a model consecutive calls seldom share a shape), counted from the op's entry
(``at::_ops::<op>::call``) with one intra-op thread. Both devices run the same CPU kernel
(musa's ``add`` its direct path), so the difference is musa's own per-call work: the
wrapper, its aliases, the mapping of the result back. ``--step`` also counts one training
step of a 12-layer GPT-2 of width 32 (float32, fused AdamW; instructions and L1
instruction-cache misses per step over four steps after three), where the ops' code is
cold between calls as it is in a real model. The step runs without autocast: under it
musa follows CUDA's cast lists and the CPU device its own, so the two would not run the
same ops.

    python benchmarks/op_instructions.py [--ops mm,addmm] [--step] [--out benchmarks/results]

Writes ``op_instructions.json`` and ``op_instructions.md``. Needs valgrind (Debian:
``apt-get install valgrind``); about a minute per op on two cores (``--step``: ~5 more).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = 1302  # a multiple of the three shapes

#: op -> (the entry callgrind counts from, the Python that makes one call, given a, b, bias).
OPS = {
    "mm": ("mm", "torch.mm(a, b)"),
    "addmm": ("addmm", "torch.addmm(bias, a, b)"),
    "add": ("add_Tensor", "torch.add(a, a)"),
    "gelu": ("gelu", "torch.nn.functional.gelu(a)"),
    "softmax": ("softmax_int", "a.softmax(-1)"),
    "layer_norm": ("layer_norm", "torch.nn.functional.layer_norm(a, a.shape[-1:])"),
    "to(bf16)": ("to_dtype", "a.to(torch.bfloat16)"),
    "cat": ("cat", "torch.cat([a, a])"),
}

OP_WORKER = """
import sys, torch
dev = sys.argv[1]
if dev == "musa":
    import torch_musa  # noqa: F401
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
def r(*s):
    return torch.randn(*s, generator=g).to(dev)
shapes = [(r(8, 8), r(8, 8), r(8)), (r(4, 16), r(16, 4), r(4)), (r(3, 6, 8)[0].t(), r(6, 5), r(5))]
for i in range({calls}):
    a, b, bias = shapes[i % 3]
    {call}
"""

STEP_WORKER = """
import os, sys, torch
sys.path.insert(0, {here!r})
dev = sys.argv[1]
if dev == "musa":
    import torch_musa  # noqa: F401
torch.set_num_threads(1)
from bench_cuda_driver import gpt2_step
step = gpt2_step(dev, 2, 16, amp=False, n_layer=12, n_embd=32, n_head=2, vocab_size=64,
                 attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
for _ in range(3):
    step()
os.system(f"callgrind_control -i on {{os.getpid()}} >/dev/null")
for _ in range({steps}):
    step()
os.system(f"callgrind_control -i off {{os.getpid()}} >/dev/null")
"""


def totals(path: str) -> dict[str, int]:
    """callgrind's whole-run totals by event name."""
    events, values = None, None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                values = [int(v) for v in line.split()[1:]]
    if events is None or values is None:
        raise RuntimeError(f"{path}: no totals in callgrind's output")
    return dict(zip(events, values))


def callgrind(script: str, device: str, args: list[str]) -> dict[str, int]:
    """Runs ``script`` under callgrind on ``device``; the event totals."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "worker.py"), os.path.join(tmp, "callgrind.out")
        with open(src, "w") as f:
            f.write(script)
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", OMP_NUM_THREADS="1")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *args,
               sys.executable, src, device]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{device}: the worker failed under callgrind:\n{proc.stderr[-2000:]}")
        return totals(out)


def both_devices(script: str, args: list[str]) -> dict[str, dict[str, int]]:
    """The two devices' runs side by side (one core each): each a process under callgrind."""
    with ThreadPoolExecutor(2) as pool:
        runs = {d: pool.submit(callgrind, script, d, args) for d in ("musa", "cpu")}
        return {d: r.result() for d, r in runs.items()}


def count_op(name: str) -> dict:
    entry, call = OPS[name]
    runs = both_devices(OP_WORKER.format(calls=CALLS, call=call),
                        ["--collect-atstart=no", f"--toggle-collect=at::_ops::{entry}::call(*"])
    per = {}
    for device, ev in runs.items():
        if ev["Ir"] == 0:
            raise RuntimeError(f"{name}: at::_ops::{entry}::call was never entered on {device}")
        per[device] = ev["Ir"] / CALLS
    return {"op": name, "musa": per["musa"], "cpu": per["cpu"],
            "ratio": per["musa"] / per["cpu"], "extra": per["musa"] - per["cpu"]}


def count_step(steps: int = 4) -> dict:
    runs = both_devices(STEP_WORKER.format(here=HERE, steps=steps), ["--instr-atstart=no", "--cache-sim=yes"])
    per = {d: {k: ev[k] / steps for k in ("Ir", "I1mr", "D1mr")} for d, ev in runs.items()}
    return {"musa": per["musa"], "cpu": per["cpu"],
            "ratio": {k: per["musa"][k] / per["cpu"][k] for k in per["musa"]}}


def markdown(result: dict) -> str:
    lines = ["# Host instructions per op call: musa (host driver) against the CPU device", "",
             f"callgrind, {CALLS} calls over three alternating shapes, one thread "
             f"(`benchmarks/op_instructions.py`); torch {result['torch']}, commit {result['commit']}.", "",
             "| op | musa | CPU device | musa/CPU | musa − CPU |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['op']} | {r['musa']:,.0f} | {r['cpu']:,.0f} | {r['ratio']:.3f} | {r['extra']:+,.0f} |"
              for r in result["ops"]]
    if result.get("step"):
        s = result["step"]
        lines += ["", "A 12-layer GPT-2 of width 32, one training step (float32, fused AdamW: the same "
                  "ops on both devices), per step over four:", "",
                  "| per step | musa | CPU device | musa/CPU |", "|---|---:|---:|---:|"]
        lines += [f"| {label} | {s['musa'][k]:,.0f} | {s['cpu'][k]:,.0f} | {s['ratio'][k]:.3f} |"
                  for k, label in (("Ir", "instructions"), ("I1mr", "L1 instruction misses"),
                                   ("D1mr", "L1 data read misses"))]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of: {', '.join(OPS)}")
    ap.add_argument("--step", action="store_true", help="also one GPT-2 training step")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.ops.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPS]
    if unknown:
        ap.error(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(OPS)}")
    if shutil.which("valgrind") is None:
        print("op_instructions: valgrind is not installed (Debian: apt-get install valgrind)",
              file=sys.stderr)
        return 2
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    result = {"torch": torch.__version__, "commit": commit, "calls": CALLS, "ops": []}
    print(f"{'op':<12} {'musa':>9} {'cpu':>9} {'ratio':>7} {'extra':>8}", flush=True)
    for i, name in enumerate(names, 1):
        t0 = time.perf_counter()
        row = count_op(name)
        result["ops"].append(row)
        print(f"{name:<12} {row['musa']:>9,.0f} {row['cpu']:>9,.0f} {row['ratio']:>7.3f} "
              f"{row['extra']:>+8,.0f}   [{i}/{len(names)}, {time.perf_counter() - t0:.0f} s]", flush=True)
    if args.step:
        print("a GPT-2 step on each device (a few minutes)...", flush=True)
        result["step"] = count_step()
        s = result["step"]
        print(f"step: instructions {s['ratio']['Ir']:.3f}, L1 instruction misses "
              f"{s['ratio']['I1mr']:.3f} of the CPU device's", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "op_instructions.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "op_instructions.md"), "w") as f:
        f.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

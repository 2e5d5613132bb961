"""Public projects' training steps on musa and on the CPU device, with 1 and N
threads (issue 37, item 4: musa with N threads at least as fast as with 1, and
within 1.10x of the CPU device with N).

Runs the projects' own code from a checkout (nothing is downloaded here):

- karpathy/makemore: `makemore.py` unmodified (its transformer, names.txt, the
  step time it prints every 10 steps; tensorboard stubbed out, no data workers);
- karpathy/llama2.c: `model.py`'s Transformer and its `configure_optimizers`
  (AdamW), a small config (dim 64, 5 layers, 8 heads, 4 KV heads, vocab 512,
  sequence 64, batch 8) on random tokens.

Each configuration runs in a fresh process, `rounds` times, alternating.

    python benchmarks/bench_public_threads.py --makemore DIR --llama2c DIR [--threads 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MAKEMORE = r'''
import contextlib, io, re, runpy, statistics, sys, types
dev, thr = sys.argv[1], int(sys.argv[2])
import torch
torch.set_num_threads(thr)
stub = types.ModuleType("torch.utils.tensorboard")
stub.SummaryWriter = lambda *a, **k: types.SimpleNamespace(add_scalar=lambda *a, **k: None,
                                                           flush=lambda: None)
sys.modules["torch.utils.tensorboard"] = stub
import torch_musa
sys.argv = ["makemore.py", "-i", "names.txt", "-o", f"/tmp/makemore_{dev}{thr}", "--device", dev,
            "--max-steps", "201", "-n", "0"]
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    runpy.run_path("makemore.py", run_name="__main__")
times = [float(m) for m in re.findall(r"step time ([\d.]+)ms", buf.getvalue())][3:]
print(statistics.median(times))
'''

LLAMA2C = r'''
import statistics, sys, time
dev, thr = sys.argv[1], int(sys.argv[2])
import torch, torch_musa
torch.set_num_threads(thr)
from model import ModelArgs, Transformer
torch.manual_seed(0)
args = ModelArgs(dim=64, n_layers=5, n_heads=8, n_kv_heads=4, vocab_size=512, multiple_of=32,
                 max_seq_len=64, dropout=0.0)
model = Transformer(args).to(dev)
opt = model.configure_optimizers(0.1, 5e-4, (0.9, 0.95), dev)
x = torch.randint(0, 512, (8, 64), device=dev)
y = torch.randint(0, 512, (8, 64), device=dev)
ts = []
for _ in range(80):
    t = time.perf_counter()
    model(x, y)
    model.last_loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.last_loss.item()
    ts.append(time.perf_counter() - t)
print(statistics.median(ts[10:]) * 1e3)
'''


def run(code: str, cwd: str, device: str, threads: int) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", code, device, str(threads)], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{device} x{threads} in {cwd} failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--makemore", help="a checkout of karpathy/makemore")
    ap.add_argument("--llama2c", help="a checkout of karpathy/llama2.c")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    projects = [(name, code, path) for name, code, path in
                (("makemore", MAKEMORE, args.makemore), ("llama2.c", LLAMA2C, args.llama2c)) if path]
    if not projects:
        ap.error("name at least one checkout (--makemore, --llama2c)")
    n = args.threads
    configs = [("musa", 1), ("musa", n), ("cpu", 1), ("cpu", n)]
    results = []
    print(f"median step time (ms) per run, {args.rounds} rounds, fresh process each")
    print(f"{'project':<10} {'musa x1':>9} {f'musa x{n}':>9} {'cpu x1':>9} {f'cpu x{n}':>9}"
          f" {f'musa x{n}/x1':>12} {f'musa/cpu x{n}':>13}")
    for name, code, path in projects:
        for r in range(args.rounds):
            t = {f"{d} x{k}": run(code, path, d, k) for d, k in configs}
            scaling = t[f"musa x{n}"] / t["musa x1"]
            vs_cpu = t[f"musa x{n}"] / t[f"cpu x{n}"]
            print(f"{name:<10} " + " ".join(f"{v:9.2f}" for v in t.values())
                  + f" {scaling:11.2f}{'' if scaling <= 1.0 else '!'} {vs_cpu:12.2f}"
                  + ("" if vs_cpu <= 1.10 else "!"))
            results.append({"project": name, "round": r, "ms": t, "musa_n_over_1": scaling,
                            "musa_over_cpu_n": vs_cpu})
    print("targets: musa xN/x1 <= 1.00, musa/cpu xN <= 1.10 ('!' marks a miss)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": n, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()

"""Does musa gain from a second thread as the CPU device does? (issue 37, item 4)

A small-op training step (a 4-layer transformer encoder, d_model 64, batch 32x16,
AdamW: makemore's size) on musa and on the CPU device, with 1 and with N threads,
each configuration in a fresh process; per phase (forward, backward, optimizer)
medians. Prints each phase's time and the ratios that matter: musa with N threads
against musa with 1 (target <= 1.0) and against the CPU with N (target <= 1.10).

    python benchmarks/bench_threads.py [--threads 2] [--steps 60]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r'''
import json, sys, time, torch, torch_musa
dev, nthr, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(nthr)
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
model = torch.nn.Sequential(torch.nn.Embedding(27, 64),
                            torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False),
                            torch.nn.Linear(64, 27)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(0, 27, (32, 16), device=dev)
y = torch.randint(0, 27, (32, 16), device=dev)
phases = {"forward": [], "backward": [], "optimizer": []}
for i in range(steps + 10):
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(x).view(-1, 27), y.view(-1))
    t1 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    loss.item()
    t3 = time.perf_counter()
    if i >= 10:
        for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2)):
            phases[k].append(v)
med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in phases.items()}
med["step"] = sum(med.values())
print(json.dumps(med))
'''


def measure(device: str, threads: int, steps: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, device, str(threads), str(steps)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args()
    runs = {(d, n): measure(d, n, a.steps) for d in ("cpu", "musa") for n in (1, a.threads)}
    n = a.threads
    print(f"{'config':<12}" + "".join(f"{k:>11}" for k in ("forward", "backward", "optimizer", "step")))
    for (d, t), r in runs.items():
        print(f"{d + ' x' + str(t):<12}" + "".join(f"{r[k]:>9.2f}ms" for k in ("forward", "backward", "optimizer", "step")))
    for k in ("forward", "backward", "optimizer", "step"):
        print(f"{k:<10} musa x{n} / musa x1 {runs['musa', n][k] / runs['musa', 1][k]:.2f} (<= 1.0)   "
              f"musa x{n} / cpu x{n} {runs['musa', n][k] / runs['cpu', n][k]:.2f} (<= 1.10)")


if __name__ == "__main__":
    main()

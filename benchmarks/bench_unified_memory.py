"""torch.load(map_location="musa") of a checkpoint with and without unified memory.

Without it the checkpoint is read into CPU memory and copied into device memory (two
copies at the peak); with PYTORCH_MUSA_ALLOC_CONF=cpu:unified the CPU storages are
already device memory and moving them copies nothing. Each mode runs in a fresh
process, for torch.load(map_location="musa") and for a load on the CPU kept alive
while its tensors move with .to("musa"); the figures are the process's peak resident memory above its baseline, the
load's wall time and musa's memory_allocated afterwards.

    python benchmarks/bench_unified_memory.py [--gb 1.0] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import time, torch, torch_musa
def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
base = rss_mib()
t0 = time.perf_counter()
if MODE == "map_location":
    sd = torch.load(PATH, map_location="musa")
else:  # load on the CPU, keep it, move a copy to musa (model.to("musa") after loading)
    cpu = torch.load(PATH)
    sd = {k: v.to("musa") for k, v in cpu.items()}
t = time.perf_counter() - t0
assert all(v.device.type == "musa" for v in sd.values())
print(json.dumps({"peak_mib": rss_mib() - base, "seconds": t,
                  "allocated_mib": torch.musa.memory_allocated() / 2**20}))
"""


def run(path: str, unified: bool, mode: str) -> dict:
    env = dict(os.environ)
    if unified:
        env["PYTORCH_MUSA_ALLOC_CONF"] = "cpu:unified"
    code = "import json\n" + CHILD.replace("PATH", repr(path)).replace("MODE", repr(mode))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

    n = int(args.gb * 2**30 / 4 / 16)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        torch.save({f"w{i}": torch.randn(n) for i in range(16)}, path)
        size = os.path.getsize(path) / 2**20
        print(f"checkpoint: {size:.0f} MiB in 16 tensors")
        for mode in ("map_location", "cpu_then_to"):
            for unified in (False, True):
                runs = [run(path, unified, mode) for _ in range(args.repeats)]
                best = min(runs, key=lambda r: r["seconds"])
                print(f"{mode:13s} {'cpu:unified' if unified else 'default':12s} "
                      f"peak RSS +{max(r['peak_mib'] for r in runs):7.0f} MiB  load {best['seconds']:.3f} s  "
                      f"musa allocated {best['allocated_mib']:.0f} MiB")


if __name__ == "__main__":
    main()

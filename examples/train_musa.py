"""Main job: train a small CNN and a small transformer on musa:0, next to the CPU.

Prints the device properties, the loss of every step on musa and on the CPU
device (same seed, same batches), whether they agree, and the memory the
musa allocator saw.
"""
from __future__ import annotations

import argparse
import time

import torch

import torch_musa  # noqa: F401  (registers the device; autoload does it too)
from torch_musa.testing.models import train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="musa:0")
    args = ap.parse_args()

    props = torch.musa.get_device_properties(args.device)
    print(f"torch {torch.__version__}, torch_musa {torch_musa.__version__}, "
          f"driver: {torch_musa._C._driver_name()}, {torch.musa.device_count()} musa devices")
    print(props)
    print(f"bf16 supported: {torch.musa.is_bf16_supported()}, "
          f"arch list: {torch.musa.get_arch_list()}\n")

    # The host kernels' libraries initialise on first use (oneDNN: about 2 s); pay that
    # before timing, so it is not charged to whichever device runs first.
    train("cnn", "cpu", steps=1)

    all_match = True
    for kind in ("cnn", "transformer"):
        torch.musa.reset_peak_memory_stats(args.device)
        t0 = time.perf_counter()
        musa_losses, musa_params = train(kind, args.device, steps=args.steps, optimizer="adamw", foreach=True)
        t_musa = time.perf_counter() - t0
        t0 = time.perf_counter()
        cpu_losses, cpu_params = train(kind, "cpu", steps=args.steps, optimizer="adamw", foreach=True)
        t_cpu = time.perf_counter() - t0
        print(f"== {kind}: {args.steps} AdamW steps  (musa {t_musa:.2f} s, cpu {t_cpu:.2f} s)")
        print(f"{'step':>4}  {'loss on ' + args.device:>16}  {'loss on cpu':>16}  {'|diff|':>9}")
        for i, (a, b) in enumerate(zip(musa_losses, cpu_losses)):
            print(f"{i:4d}  {a:16.8f}  {b:16.8f}  {abs(a - b):9.2e}")
        worst = max((musa_params[k].float() - cpu_params[k].float()).abs().max().item() for k in musa_params)
        match = max(abs(a - b) for a, b in zip(musa_losses, cpu_losses)) <= 1e-5 and worst <= 1e-3
        all_match &= match
        print(f"max |param diff| after training: {worst:.2e}  -> {'MATCH' if match else 'MISMATCH'}")
        print(f"peak allocated on {args.device}: {torch.musa.max_memory_allocated(args.device) / 2**20:.2f} MiB, "
              f"reserved now: {torch.musa.memory_reserved(args.device) / 2**20:.2f} MiB\n")
    print(torch.musa.memory_summary(args.device, abbreviated=True))
    if not all_match:
        raise SystemExit("musa and cpu training disagree")


if __name__ == "__main__":
    main()

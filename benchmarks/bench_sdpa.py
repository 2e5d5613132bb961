"""Flash vs math scaled-dot-product attention on musa: peak device memory and time.

    .venv/bin/python benchmarks/bench_sdpa.py                 # seq 1k..8k: forward, then forward+backward
    .venv/bin/python benchmarks/bench_sdpa.py --mode fwd      # forward only
    .venv/bin/python benchmarks/bench_sdpa.py --seq 1024 2048 --heads 8 --dtype bfloat16
    .venv/bin/python benchmarks/bench_sdpa.py --causal --threads 0

Peak memory is ``torch.musa.max_memory_allocated`` during the call minus the
memory held before it (inputs), so it counts the attention's own temporaries
and output. Target: flash grows linearly with the sequence length, math
quadratically, and flash is no slower than math from 4k on.
"""
from __future__ import annotations

import argparse
import time

import torch

import torch_musa  # noqa: F401
from torch.nn.attention import SDPBackend, sdpa_kernel


def _register():
    import torch_musa.amp
    import torch_musa.attention

    torch_musa.amp.register()
    torch_musa.attention.register()


def measure(backend, q, k, v, causal, backward, repeats):
    F = torch.nn.functional.scaled_dot_product_attention
    times = []
    peak = 0
    for _ in range(repeats):
        grad = torch.ones(q.shape, dtype=q.dtype, device=q.device) if backward else None
        torch.musa.synchronize()
        base = torch.musa.memory_allocated()
        torch.musa.reset_peak_memory_stats()
        t0 = time.perf_counter()
        with sdpa_kernel(backend):
            out = F(q, k, v, is_causal=causal)
            if backward:
                torch.autograd.grad(out, (q, k, v), grad)
        torch.musa.synchronize()
        times.append(time.perf_counter() - t0)
        peak = max(peak, torch.musa.max_memory_allocated() - base)
        del out
    return min(times), peak


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--mode", choices=["fwd", "fwdbwd", "both"], default="both")
    ap.add_argument("--repeats", type=int, default=2, help="best of N")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads (default 1: on a shared, loaded host OpenMP threads "
                         "oversubscribe the cores and the timings become noise; 0 keeps torch's default)")
    ap.add_argument("--skip-math-above", type=int, default=8192,
                    help="do not run math beyond this length (its L x L matrices)")
    args = ap.parse_args(argv)
    _register()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    for backward in {"fwd": [False], "fwdbwd": [True], "both": [False, True]}[args.mode]:
        run(args, dtype, backward)


def run(args, dtype, backward):
    print(f"\nB={args.batch} H={args.heads} D={args.head_dim} {args.dtype} causal={args.causal} "
          f"{'forward+backward' if backward else 'forward'} threads={torch.get_num_threads()}")
    print(f"{'seq':>6} {'flash ms':>10} {'math ms':>10} {'speedup':>8} {'flash MiB':>10} {'math MiB':>10}")
    g = torch.Generator().manual_seed(0)
    for L in args.seq:
        shape = (args.batch, args.heads, L, args.head_dim)
        q, k, v = (torch.randn(shape, generator=g).to(dtype).to("musa").requires_grad_(backward)
                   for _ in range(3))
        ft, fm = measure(SDPBackend.FLASH_ATTENTION, q, k, v, args.causal, backward, args.repeats)
        if L <= args.skip_math_above:
            mt, mm = measure(SDPBackend.MATH, q, k, v, args.causal, backward, args.repeats)
            print(f"{L:>6} {ft * 1e3:>10.1f} {mt * 1e3:>10.1f} {mt / ft:>7.2f}x {fm / 2**20:>10.1f} "
                  f"{mm / 2**20:>10.1f}", flush=True)
        else:
            print(f"{L:>6} {ft * 1e3:>10.1f} {'-':>10} {'-':>8} {fm / 2**20:>10.1f} {'-':>10}", flush=True)
        del q, k, v
        torch.musa.empty_cache()


if __name__ == "__main__":
    main()

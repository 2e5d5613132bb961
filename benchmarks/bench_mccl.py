"""all_reduce bus bandwidth: mccl on musa tensors vs plain Gloo on CPU tensors
(or, under the cuda driver with ``--reference nccl``, vs native NCCL on cuda tensors).

Both run in the same processes, one size at a time, alternating rounds
(mccl, gloo, mccl, gloo, ...) so machine noise hits both alike; each cell is
the best round (``--stat min``, default: the least disturbed estimate on a
shared machine) or the median round (``--stat median``). ``floor`` is the same
ratio for a second, identical Gloo group against the first: how far two equal
paths differ on this machine, the noise any ratio carries. Bus bandwidth = bytes * 2(n-1)/n / time (the nccl-tests
convention). ratio = mccl busbw / gloo busbw (target >= 0.95).

    .venv/bin/python benchmarks/bench_mccl.py                      # 2 ranks, 1 KB .. 256 MB
    .venv/bin/python benchmarks/bench_mccl.py --sizes 1K,1M,64M --world 3 --rounds 7
    .venv/bin/python benchmarks/bench_mccl.py --json out.json
    TORCH_MUSA_DRIVER=cuda python benchmarks/bench_mccl.py --reference nccl --sizes 1M,16M,256M,1G
        # one rank per GPU: mccl (NCCL on musa tensors) vs nccl on cuda tensors
    .venv/bin/python benchmarks/bench_mccl.py --out benchmarks/results
        # also mccl_vs_<reference>.{json,md,png} there, with the machine described
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import sys
import time

DEFAULT_SIZES = "1K,4K,16K,64K,256K,1M,4M,16M,64M,256M"


def parse_size(s: str) -> int:
    s = s.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def fmt_size(n: int) -> str:
    for unit, m in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= m:
            return f"{n // m} {unit}" if n % m == 0 else f"{n / m:.1f} {unit}"
    return f"{n} B"


def _iters(nbytes: int, budget_s: float) -> int:
    # rough: ~100 us latency + ~1.5 GB/s; at least 2, at most 400 per round
    est = 100e-6 + nbytes / 1.5e9
    return max(2, min(400, int(budget_s / est)))


def worker(rank: int, world: int, port: int, sizes, rounds: int, budget: float, out_path: str | None,
           stat: str = "min", reference: str = "gloo"):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch

    import torch_musa
    import torch_musa.distributed

    torch_musa.distributed.register()
    import torch.distributed as dist

    torch.set_num_threads(1)
    dev = torch.device("musa", rank % torch.musa.device_count())
    torch.musa.set_device(dev)
    dist.init_process_group("mccl", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300))
    gloo = dist.new_group(backend="gloo")  # control traffic (barriers, agreeing on iters)
    ref = dist.new_group(backend=reference)
    ref2 = dist.new_group(backend=reference)  # the noise floor: the reference against itself
    ref_dev = torch.device("cuda", dev.index) if reference == "nccl" else torch.device("cpu")
    rows = []
    for nbytes in sizes:
        numel = max(1, nbytes // 4)
        m = torch.ones(numel, device=dev)
        c = torch.ones(numel, device=ref_dev)
        iters = _iters(nbytes, budget)
        # agree on iters (rank 0 decides)
        it = torch.tensor([iters], dtype=torch.int64)
        dist.broadcast(it, src=0, group=gloo)
        iters = int(it.item())

        def timed(t, group):
            sync = torch.musa.synchronize if t.device.type == "musa" else (
                torch.cuda.synchronize if t.device.type == "cuda" else (lambda: None))
            sync()
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t, group=group)
            sync()  # device collectives (NCCL) are stream-ordered: time them to completion
            return (time.perf_counter() - t0) / iters

        timed(m, None)  # warm-up every path
        timed(c, ref)
        timed(c, ref2)
        tm, tg, tf = [], [], []
        for r in range(rounds):
            if r % 2 == 0:
                tm.append(timed(m, None))
                tg.append(timed(c, ref))
                tf.append(timed(c, ref2))
            else:
                tf.append(timed(c, ref2))
                tg.append(timed(c, ref))
                tm.append(timed(m, None))
        # ranks' times differ a little; use the slowest rank's
        pick = min if stat == "min" else statistics.median
        agg = torch.tensor([pick(tm), pick(tg), pick(tf)], dtype=torch.float64)
        dist.all_reduce(agg, op=dist.ReduceOp.MAX, group=gloo)
        t_m, t_g, t_f = agg.tolist()
        factor = 2 * (world - 1) / world
        bw_m = numel * 4 * factor / t_m / 1e9
        bw_g = numel * 4 * factor / t_g / 1e9
        rows.append({"bytes": numel * 4, "iters": iters, "mccl_us": t_m * 1e6, "ref_us": t_g * 1e6,
                     "mccl_busbw_GBps": bw_m, "ref_busbw_GBps": bw_g, "ratio": bw_m / bw_g,
                     "floor_ratio": t_g / t_f})
        if rank == 0:
            r = rows[-1]
            print(f"{fmt_size(r['bytes']):>8} {iters:>6} {r['mccl_us']:>12.1f} {r['ref_us']:>12.1f} "
                  f"{bw_m:>11.3f} {bw_g:>11.3f} {r['ratio']:>7.3f} {r['floor_ratio']:>7.3f}", flush=True)
        del m, c
    if rank == 0 and out_path:
        with open(out_path, "w") as f:
            json.dump({"world": world, "rounds": rounds, "stat": stat, "reference": reference, "rows": rows},
                      f, indent=1)
    dist.destroy_process_group()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma list, e.g. 1K,1M,256M (default {DEFAULT_SIZES})")
    ap.add_argument("--world", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds per size (default 7)")
    ap.add_argument("--budget", type=float, default=0.1, help="target seconds per round and backend")
    ap.add_argument("--stat", choices=("min", "median"), default="min", help="per-size statistic over rounds")
    ap.add_argument("--json", default=None, help="write the table as JSON here")
    ap.add_argument("--out", default=None,
                    help="write mccl_vs_<reference>.{json,md,png} into this folder (machine described)")
    ap.add_argument("--reference", choices=("gloo", "nccl"), default="gloo",
                    help="what mccl is compared with: Gloo on CPU tensors, or (cuda driver, one rank per GPU) "
                         "NCCL on cuda tensors")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    if args.reference == "nccl" and os.environ.get("TORCH_MUSA_DRIVER", "host") != "cuda":
        ap.error("--reference nccl compares on GPUs: run with TORCH_MUSA_DRIVER=cuda, one rank per GPU")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp

    os.environ.setdefault("TORCH_MUSA_FALLBACK", "silent")
    print(f"all_reduce, {args.world} ranks, float32, {args.stat} of {args.rounds} alternating rounds, "
          f"busbw = bytes*2(n-1)/n/time")
    r = args.reference
    print(f"{'size':>8} {'iters':>6} {'mccl us':>12} {r + ' us':>12} {'mccl GB/s':>11} {r + ' GB/s':>11} "
          f"{'ratio':>7} {'floor':>7}", flush=True)
    json_path = args.json
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        json_path = json_path or os.path.join(args.out, f"mccl_vs_{r}.json")
    t0 = time.time()
    mp.start_processes(_entry, args=(args.world, port, sizes, args.rounds, args.budget, json_path, args.stat,
                                     args.reference),
                       nprocs=args.world, start_method="spawn", join=True)
    print(f"({time.time() - t0:.0f} s)")
    if args.out:
        with open(json_path) as f:
            result = json.load(f)
        result["machine"] = _machine(args.reference)
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
        write_report(args.out, result)


def _machine(reference: str) -> dict:
    import torch

    m = {"torch": torch.__version__, "python": platform.python_version(), "cpu_count": os.cpu_count(),
         "platform": platform.platform(), "musa_driver": os.environ.get("TORCH_MUSA_DRIVER", "host")}
    if reference == "nccl" and torch.cuda.is_available():
        m["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        m["cuda"] = torch.version.cuda
        m["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return m


def write_report(out: str, result: dict) -> None:
    """The table as Markdown and the ratio per size as a PNG, next to the JSON."""
    ref, m = result["reference"], result["machine"]
    name = f"mccl_vs_{ref}"
    where = ", ".join(m.get("gpus", [])) or f"{m['cpu_count']} CPU cores"
    lines = [f"# all_reduce bus bandwidth: mccl vs {ref} ({result['world']} ranks)", "",
             f"{where}; torch {m['torch']}, musa driver {m['musa_driver']}"
             + (f", CUDA {m['cuda']}, NCCL {m['nccl']}" if "nccl" in m else "")
             + f"; {result['stat']} of {result['rounds']} alternating rounds; float32.", "",
             f"| size | mccl GB/s | {ref} GB/s | ratio | floor | target |", "|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        lines.append(f"| {fmt_size(row['bytes'])} | {row['mccl_busbw_GBps']:.3f} | {row['ref_busbw_GBps']:.3f} | "
                     f"{row['ratio']:.3f} | {row['floor_ratio']:.3f} | ≥ 0.95 |")
    lines += ["", "ratio = mccl busbw / reference busbw; floor = a second, identical reference group "
                  "against the first (the noise any ratio carries)."]
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no PNG", file=sys.stderr)
        return
    rows = result["rows"]
    xs = [row["bytes"] for row in rows]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.semilogx(xs, [row["ratio"] for row in rows], "o-", label="mccl / " + ref)
    ax.semilogx(xs, [row["floor_ratio"] for row in rows], "x:", color="grey", label="floor (" + ref + " / itself)")
    ax.axhline(0.95, color="tab:red", ls="--", lw=1, label="target 0.95")
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth ratio")
    ax.set_title(f"all_reduce, {result['world']} ranks — {where}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name + ".png"), dpi=110)


def _entry(rank, world, port, sizes, rounds, budget, out_path, stat, reference):
    worker(rank, world, port, sizes, rounds, budget, out_path, stat, reference)


if __name__ == "__main__":
    main()

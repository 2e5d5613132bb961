"""Benchmark musa-converter on a copy of the installed ``torch`` package's Python sources.

    PYTHONPATH=. python benchmarks/bench_converter.py [--jobs N] [--keep DIR]

Copies every ``*.py`` file of the installed torch package to a temporary
folder, converts the copy in place (no backups, as ``--no-backup``), and
prints files, lines, total time and lines/s. Target: the whole tree in under
30 s on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time


def copy_sources(src: str, dst: str) -> int:
    n = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        rel = os.path.relpath(dirpath, src)
        for f in filenames:
            if f.endswith(".py"):
                os.makedirs(os.path.join(dst, rel), exist_ok=True)
                shutil.copyfile(os.path.join(dirpath, f), os.path.join(dst, rel, f))
                n += 1
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=0, help="worker processes (default: all cores)")
    ap.add_argument("--source", default=None, help="tree to copy (default: the installed torch)")
    ap.add_argument("--keep", default=None, help="convert into this folder and keep it")
    ap.add_argument("--report", default=None, help="write the converter's JSON report here")
    args = ap.parse_args(argv)

    if args.source is None:
        import importlib.util
        spec = importlib.util.find_spec("torch")
        args.source = os.path.dirname(spec.origin)
    from torch_musa.utils.musa_converter import Options, run
    from torch_musa.utils.musa_converter.cli import print_report

    tmp = args.keep or tempfile.mkdtemp(prefix="bench_converter.")
    dst = os.path.join(tmp, "torch")
    try:
        t = time.perf_counter()
        n = copy_sources(args.source, dst)
        print(f"copied {n} files from {args.source} in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        res = run(Options(root=dst, backup=False, jobs=args.jobs, progress=None))
        dt = time.perf_counter() - t
        print_report(res, quiet=True)
        if args.report:
            import json
            with open(args.report, "w") as f:
                json.dump(res.to_json(), f, indent=1)
        lines = sum(f.lines for f in res.files)
        changed = sum(f.status == "converted" for f in res.files)
        failed = [f for f in res.files if f.error]
        print(f"files: {len(res.files)}  lines: {lines}  converted: {changed}  failed: {len(failed)}")
        for f in failed[:10]:
            print(f"  failed: {f.path}: {f.reason}")
        print(f"jobs: {args.jobs or os.cpu_count()}  total: {dt:.2f} s  {lines / dt:,.0f} lines/s")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark musa-converter on a copy of the installed ``torch`` package's Python sources.

    PYTHONPATH=. python benchmarks/bench_converter.py [--jobs N] [--keep DIR]
    PYTHONPATH=. python benchmarks/bench_converter.py --big [--lines 80000] [--out benchmarks/results]

``--big`` instead times one generated file per shape (a rewrite on every
line; functions with comments and headers; one class; one literal of LINES
entries; "dense": a rewrite and a comment naming cuda on every line) and
``musa-converter --version``, each in its own process (wall time, CPU time,
peak RSS, lines per CPU second), and writes converter_big_files.{json,md}.
Targets: 80,000 lines in at most 10 s and 600 MB (dense: 4 s and 300 MB on
one core, -j 1), ``--version`` under 0.5 s.
``--tree DIR`` runs the converter of another checkout (e.g. an older commit
from ``git worktree``) for before/after figures.

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


SHAPES = {
    "flat": lambda n: "".join(f"x{i} = torch.ones({i}).cuda()\n" for i in range(n)),
    "functions": lambda n: "".join(
        f"def f{i}(x):\n    # move to gpu: x.cuda()\n    y = torch.ones(2).cuda()\n"
        f"    if torch.cuda.is_available():\n        y = y.to('cuda:0')\n    return x + y\n\n"
        for i in range(n // 7)),
    "class": lambda n: "class Big:\n" + "".join(
        f"    def m{i}(self, x):\n        return x.cuda() + {i}\n\n" for i in range(n // 3)),
    "literal": lambda n: "TABLE = {\n" + "".join(
        f"    'k{i}': 'cuda:{i % 8}',\n" for i in range(n - 2)) + "}\n",
    # a rewrite and a prose comment that names cuda on every line (issue 35: 0.46 ms a line)
    "dense": lambda n: "".join(
        f"x{i} = torch.ones(2).cuda() + {i}  # cuda tensor number {i}\n" for i in range(n)),
}

# Runs the converter of TREE without importing torch (as the musa-converter
# launcher does), so that older checkouts can be timed the same way.
_RUNNER = """
import importlib.util, sys, types
sys.path.insert(0, sys.argv[1])
spec = importlib.util.find_spec("torch_musa")
root = types.ModuleType("torch_musa"); root.__path__ = list(spec.submodule_search_locations)
sys.modules["torch_musa"] = root
from torch_musa.utils.musa_converter.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _one(cmd: list[str]) -> dict:
    """Run in a fresh helper process so that ru_maxrss is this command's own."""
    import json
    import subprocess
    code = ("import json, resource, subprocess, sys, time\n"
            "t = time.perf_counter(); r = subprocess.run(sys.argv[1:], capture_output=True)\n"
            "wall = time.perf_counter() - t\n"
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(json.dumps({'rc': r.returncode, 'wall_s': wall, 'cpu_s': u.ru_utime + u.ru_stime,"
            " 'max_rss_mb': u.ru_maxrss / 1024, 'tail': r.stdout.decode()[-300:] + r.stderr.decode()[-300:]}))\n")
    r = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True)
    return json.loads(r.stdout)


def big_files(args) -> int:
    import json
    import platform
    tree = os.path.abspath(args.tree or os.path.join(os.path.dirname(__file__), ".."))
    base = [sys.executable, "-c", _RUNNER, tree]
    rows = []
    tmp = tempfile.mkdtemp(prefix="bench_converter_big.")
    try:
        for i in range(3):
            r = _one(base + ["--version"])
            rows.append({"case": "--version", "lines": 0, "run": i, **r})
            print(f"--version: {r['wall_s']:.2f} s wall, {r['max_rss_mb']:.0f} MB")
        for shape in args.shapes.split(","):
            d = os.path.join(tmp, shape)
            os.makedirs(d)
            with open(os.path.join(d, f"big_{shape}.py"), "w") as f:
                f.write(SHAPES[shape](args.lines))
            r = _one(base + ["-r", d, "--no-backup", "--no-progress", "-q", "-j", "1"])
            r["lines_per_cpu_s"] = args.lines / r["cpu_s"] if r["cpu_s"] else 0.0
            rows.append({"case": shape, "lines": args.lines, "run": 0, **r})
            print(f"{shape} ({args.lines} lines): rc {r['rc']}, {r['wall_s']:.2f} s wall, "
                  f"{r['cpu_s']:.2f} s CPU, {r['max_rss_mb']:.0f} MB, "
                  f"{r['lines_per_cpu_s']:,.0f} lines/CPU s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        meta = {"date": time.strftime("%Y-%m-%d"), "tree": tree, "python": platform.python_version(),
                "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "label": args.label}
        name = "converter_big_files" + (f"_{args.label}" if args.label else "")
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        with open(os.path.join(args.out, name + ".md"), "w") as f:
            f.write(f"# musa-converter on big files ({args.label or 'current'})\n\n"
                    f"`python benchmarks/bench_converter.py --big --lines {args.lines}"
                    + (f" --shapes {args.shapes}" if args.shapes != ",".join(SHAPES) else "")
                    + (f" --tree {args.tree}" if args.tree else "") + "`, "
                    f"{meta['date']}, {meta['cpus']} shared cores, load average "
                    f"{meta['load_avg'][0]:.1f} (wall time includes waiting for a core; CPU "
                    "time does not; one worker, `-j 1`). Targets: 80,000 lines in at most 10 s "
                    "and 600 MB (dense: 4 s and 300 MB); `--version` under 0.5 s.\n\n"
                    "| case | lines | wall s | CPU s | peak RSS MB | lines/CPU s | exit |\n"
                    "|---|---|---|---|---|---|---|\n")
            for r in rows:
                lps = f"{r['lines_per_cpu_s']:,.0f}" if r.get("lines_per_cpu_s") else ""
                f.write(f"| {r['case']} | {r['lines']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
                        f"{r['max_rss_mb']:.0f} | {lps} | {r['rc']} |\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--big", action="store_true", help="time generated big files and --version")
    ap.add_argument("--lines", type=int, default=80000, help="lines per big file (--big)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="big-file shapes (--big)")
    ap.add_argument("--tree", default=None, help="checkout whose converter runs (--big)")
    ap.add_argument("--out", default=None, help="folder for the --big JSON and Markdown")
    ap.add_argument("--label", default="", help="suffix for the --big result files")
    ap.add_argument("--jobs", type=int, default=0, help="worker processes (default: all cores)")
    ap.add_argument("--source", default=None, help="tree to copy (default: the installed torch)")
    ap.add_argument("--keep", default=None, help="convert into this folder and keep it")
    ap.add_argument("--report", default=None, help="write the converter's JSON report here")
    args = ap.parse_args(argv)
    if args.big:
        return big_files(args)

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

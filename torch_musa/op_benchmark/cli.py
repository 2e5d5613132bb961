"""musa-bench: operator micro-benchmarks across devices.

    musa-bench --device musa,cpu --tag-filter short --operators softmax,matmul
    musa-bench --compare before.json after.json
    musa-bench --capture train.py --capture-output my_model.yaml -- --epochs 1
"""
from __future__ import annotations

import argparse
import os
import sys

import torch


def _split(values):
    out = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="musa-bench", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    s = p.add_argument_group("what to run")
    s.add_argument("--suite", action="append", metavar="NAME|FILE|DIR",
                   help="built-in suite name, suite file or directory (repeatable; default: all built-in)")
    s.add_argument("--device", default=None,
                   help="comma-separated devices, e.g. musa,cpu; every test runs on each, checked "
                        "against the first (default: the accelerator, else cpu)")
    s.add_argument("--tag-filter", default="short",
                   help="comma-separated tags (short, long, ...; 'all' for every tag). Default: short")
    s.add_argument("--operators", action="append", help="ops to run: case, suite or suite.case names (globs ok)")
    s.add_argument("--test-name", action="append", help="substring or glob of test ids")
    s.add_argument("--dtype", action="append", help="only these dtypes (comma-separated)")
    s.add_argument("--forward-only", action="store_true", help="skip forward+backward tests")
    s.add_argument("--list-ops", action="store_true", help="list the ops of the selected suites")
    s.add_argument("--list-tests", action="store_true", help="list the test ids that would run")
    t = p.add_argument_group("timing")
    t.add_argument("--iterations", type=int, default=None,
                   help="timed blocks per test (default: as many as --min-time allows, at least 5)")
    t.add_argument("--warmup-iterations", type=int, default=2, help="warm-up calls per test")
    t.add_argument("--min-time", type=float, default=0.05, help="seconds of timed calls per test and device")
    t.add_argument("--rounds", type=int, default=3,
                   help="timing rounds per test, alternating between the devices (default 3)")
    t.add_argument("--num-threads", type=int, default=None, help="torch.set_num_threads for the CPU")
    t.add_argument("--seed", type=int, default=0)
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH", help="write every result and the software/hardware stack")
    o.add_argument("--csv", metavar="PATH")
    o.add_argument("--plot", metavar="PATH", help="PNG chart of the per-op ratio (or of --compare)")
    o.add_argument("--out-dir", metavar="DIR", help="write results.json, results.csv and ratio.png there")
    o.add_argument("--no-progress", action="store_true")
    o.add_argument("--quiet", action="store_true", help="no table")
    c = p.add_argument_group("other modes")
    c.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                   help="join two result files into one B/A ratio table")
    c.add_argument("--capture", metavar="SCRIPT",
                   help="run SCRIPT, record the aten ops it dispatches and write them as a suite")
    c.add_argument("--capture-output", metavar="PATH", default=None,
                   help="suite file written by --capture (default: <script>_captured.yaml)")
    c.add_argument("--capture-device", default=None,
                   help="record only ops on this device type (default: every device)")
    c.add_argument("script_args", nargs=argparse.REMAINDER,
                   help="arguments for --capture SCRIPT (after --)")
    return p


def default_devices() -> list[str]:
    try:
        acc = torch.accelerator.current_accelerator()
    except Exception:
        acc = None
    return [acc.type] if acc is not None else ["cpu"]


def _outputs(args):
    j, c, pl = args.json, args.csv, args.plot
    if args.out_dir:
        j = j or os.path.join(args.out_dir, "results.json")
        c = c or os.path.join(args.out_dir, "results.csv")
        pl = pl or os.path.join(args.out_dir, "ratio.png")
    return j, c, pl


def run_compare(args) -> int:
    from . import report
    a, b = (report.load_json(p) for p in args.compare)
    rows = report.compare_results(a, b)
    la, lb = (os.path.basename(p) for p in args.compare)
    print(f"A = {args.compare[0]} ({_stack_label(a)})")
    print(f"B = {args.compare[1]} ({_stack_label(b)})\n")
    print(report.compare_table(rows, la, lb))
    j, c, pl = _outputs(args)
    if j:
        import json
        report._mkdir(j)
        with open(j, "w", encoding="utf-8") as f:
            json.dump({"schema": report.SCHEMA + "+compare", "a": args.compare[0],
                       "b": args.compare[1], "rows": rows}, f, indent=1, default=str)
    if pl:
        report.plot_ratios(pl, report.compare_op_ratios(rows), f"B/A per op: {lb} vs {la}",
                           "B/A time ratio (geometric mean per op; <1: B faster)")
        print(f"\nchart: {pl}")
    return 0 if rows else 1


def _stack_label(doc):
    s = doc.get("stack", {})
    return ", ".join(f"{k} {s.get(k)}" for k in ("torch", "torch_musa", "driver", "hardware_profile")
                     if s.get(k))


def run_capture(args) -> int:
    from . import capture
    out = args.capture_output or os.path.splitext(os.path.basename(args.capture))[0] + "_captured.yaml"
    script_args = list(args.script_args or [])
    if script_args and script_args[0] == "--":
        script_args = script_args[1:]
    rec = capture.capture_script(args.capture, script_args, device_type=args.capture_device)
    suite_name = os.path.splitext(os.path.basename(out))[0]
    capture.write_suite(rec, out, suite_name, source=args.capture)
    print(f"captured {rec.total_calls} op calls, {len(rec.cases)} distinct cases -> {out}")
    print(f"run them:  musa-bench --suite {out} --tag-filter all --device <devices>")
    if getattr(rec, "error", None):
        print(f"warning: {args.capture} failed ({rec.error}); the suite has the ops seen before that",
              file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    if args.compare:
        return run_compare(args)
    if args.capture:
        return run_capture(args)
    if args.script_args:
        build_parser().error(f"unexpected arguments: {' '.join(args.script_args)}")

    from . import config, report, runner
    try:
        suites = config.load_suites(args.suite)
    except config.SuiteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [d for d in _split(args.dtype) if d not in config.DTYPES]
    if bad:
        print(f"error: unknown dtype {bad[0]!r} (known: {', '.join(sorted(config.DTYPES))})",
              file=sys.stderr)
        return 2
    tags = _split([args.tag_filter]) or None
    tests = config.expand(suites, tags=tags, operators=_split(args.operators) or None,
                          dtypes=_split(args.dtype) or None, forward_only=args.forward_only,
                          test_name=args.test_name)
    if args.list_ops:
        for s in suites:
            for c in s.cases:
                what = c.op or f"expr: {c.expr}"
                ctags = sorted({t for tg, _, _ in c.configs for t in tg})
                print(f"{c.full_name:32s} {what}  [{','.join(ctags)}]")
        return 0
    if args.list_tests:
        for t in tests:
            print(t.id)
        return 0
    if not tests:
        print("no tests match the filters", file=sys.stderr)
        return 1
    try:
        devices = [torch.device(d) for d in (_split([args.device]) or default_devices())]
    except RuntimeError as e:
        print(f"error: --device {args.device}: {e}", file=sys.stderr)
        return 2
    if len(set(devices)) != len(devices):
        print(f"error: --device {args.device} names a device twice", file=sys.stderr)
        return 2
    _warn_if_busy(devices)
    settings = runner.Settings(min_time=args.min_time, warmup=args.warmup_iterations,
                               iterations=args.iterations, seed=args.seed,
                               rounds=args.rounds)
    results = run_tests(tests, devices, settings, progress=not args.no_progress)
    dev_names = [str(d) for d in devices]
    if not args.quiet:
        print(report.results_table(results, dev_names))
        print(f"\n{len(tests)} tests x {len(devices)} devices: {report.summary_line(results)}")
    j, c, pl = _outputs(args)
    if j:
        report.write_json(j, report.stack_info(devices), {**settings.as_dict(), "tags": tags,
                          "argv": sys.argv[1:] if argv is None else list(argv)}, dev_names, results)
        print(f"json: {j}")
    if c:
        report.write_csv(c, results)
        print(f"csv: {c}")
    if pl:
        if len(devices) > 1:
            report.plot_ratios(pl, report.per_op_ratios(results, dev_names[0], dev_names[1]),
                               f"{dev_names[0]} / {dev_names[1]} time per op",
                               f"time ratio {dev_names[0]}/{dev_names[1]} "
                               f"(geometric mean per op; <1: {dev_names[0]} faster)")
            print(f"chart: {pl}")
        else:
            print("chart skipped: it needs two devices (or use --compare)", file=sys.stderr)
    bad = sum(r["status"] == "wrong" for r in results)
    return 3 if bad else 0


def _warn_if_busy(devices):
    """CPU thread pools that wait on a busy core turn microseconds into milliseconds."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return
    ncpu = os.cpu_count() or 1
    if torch.get_num_threads() >= ncpu and load >= 0.5 * ncpu:
        print(f"note: load average {load:.1f} on {ncpu} CPUs and {torch.get_num_threads()} torch "
              f"threads: timings will be noisy; --num-threads {max(1, ncpu // 2)} helps",
              file=sys.stderr)


def run_tests(tests, devices, settings, progress=True) -> list[dict]:
    from . import runner
    results = []
    bar = None
    if progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=len(tests), file=sys.stderr, unit="test", dynamic_ncols=True,
                       leave=False)
        except ImportError:
            bar = None
    for t in tests:
        if bar is not None:
            bar.set_postfix_str(t.id[-48:], refresh=False)
        results += runner.run_test(t, devices, settings)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return results


if __name__ == "__main__":
    sys.exit(main())

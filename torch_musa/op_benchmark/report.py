"""Results: the software/hardware stack, the terminal table, JSON, CSV, the ratio chart, --compare."""
from __future__ import annotations

import csv
import datetime
import importlib.metadata
import json
import math
import os
import platform
import socket
import subprocess
import sys
from collections import OrderedDict, defaultdict

import torch

from torch_musa import _C
from torch_musa._table import render

SCHEMA = "torch_musa.op_benchmark/1"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=5)
        return r.stdout.strip() or None
    except Exception:
        return None


def stack_info(devices: list[torch.device]) -> dict:
    """Everything a result depends on, software and hardware."""
    info = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "torch_musa": None, "torch_musa_git": _git_commit(), "driver": None,
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "accelerator": None, "devices": {},
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("TORCH_MUSA", "MUSA_", "OMP_NUM_THREADS", "MKL_NUM_THREADS"))},
    }
    try:
        import numpy
        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    info["torch_musa"] = importlib.metadata.version("torch_musa")
    info["driver"] = _C._driver_name()
    try:
        acc = torch.accelerator.current_accelerator()
        info["accelerator"] = str(acc) if acc is not None else None
    except Exception:
        pass
    for d in devices:
        entry = {"type": d.type}
        if d.type == "cpu":
            entry["name"] = info["cpu_model"]
        else:
            try:
                mod = torch.get_device_module(d.type)
                props = mod.get_device_properties(d.index or 0)
                entry["name"] = getattr(props, "name", str(props))
                entry["properties"] = str(props)
                if hasattr(mod, "device_count"):
                    entry["count"] = mod.device_count()
            except Exception as e:  # noqa: BLE001
                entry["error"] = f"{type(e).__name__}: {e}"
        info["devices"][str(d)] = entry
    # the hardware profile: the first accelerator device's name
    info["hardware_profile"] = next((v.get("name") for k, v in info["devices"].items()
                                     if v["type"] != "cpu"), None)
    return info


# ---------------------------------------------------------------- formatting
def fmt_time(s) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    us = s * 1e6
    if us < 1000:
        return f"{us:.1f}us" if us < 100 else f"{us:.0f}us"
    if us < 1e6:
        return f"{us / 1e3:.2f}ms"
    return f"{us / 1e6:.2f}s"


def _fmt_num(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def group_by_test(results: list[dict]) -> "OrderedDict[str, dict[str, dict]]":
    g: OrderedDict = OrderedDict()
    for r in results:
        g.setdefault(r["id"], {})[r["device"]] = r
    return g


def cell(r) -> str:
    if r is None:
        return "-"
    if r["status"] == "ok":
        return fmt_time(r.get("median_s"))
    return r["status"].upper()


def ratio(a, b):
    if not a or not b or a.get("status") != "ok" or b.get("status") != "ok":
        return None
    if not a.get("median_s") or not b.get("median_s"):
        return None
    return a["median_s"] / b["median_s"]


def results_table(results: list[dict], devices: list[str]) -> str:
    """One row per test: the median on each device, throughput on the first, and first/other ratios."""
    first = devices[0]
    headers = ["test", "dtype", "mode"] + [f"{d}" for d in devices]
    headers += ["±%", "GFLOP/s", "GB/s"]
    headers += [f"{first}/{d}" for d in devices[1:]]
    headers += ["check"]
    aligns = ["<", "<", "<"] + [">"] * (len(devices) + 3 + len(devices) - 1) + ["<"]
    rows, notes = [], []
    for tid, by_dev in group_by_test(results).items():
        any_r = next(iter(by_dev.values()))
        name = any_r["op"] + ("/" + ",".join(f"{k}={_p(v)}" for k, v in any_r["params"].items())
                              if any_r["params"] else "")
        r0 = by_dev.get(first)
        row = [name, any_r["dtype"], any_r["mode"]] + [cell(by_dev.get(d)) for d in devices]
        spread = None
        if r0 and r0.get("status") == "ok" and r0.get("median_s"):
            spread = 50.0 * r0["iqr_s"] / r0["median_s"]
        row += [_fmt_num(spread, 0), _fmt_num(r0.get("gflops") if r0 else None),
                _fmt_num(r0.get("gbps") if r0 else None, 2)]
        for d in devices[1:]:
            q = ratio(r0, by_dev.get(d))
            row.append("-" if q is None else f"{q:.2f}x")
        checks = []
        for d in devices:
            r = by_dev.get(d)
            if r and r["status"] != "ok":
                checks.append(f"{d}: {r['status']}")
                notes.append(f"{name} [{any_r['dtype']} {any_r['mode']}] on {d}: {r['error']}")
        if not checks:
            checks = ["ok" if any(r.get("checked") for r in by_dev.values()) else
                      ("-" if len(devices) == 1 else "unchecked")]
            if any(r.get("check_note") for r in by_dev.values()):
                checks = ["ok (by f64)"]
        row.append("; ".join(checks))
        rows.append(row)
    text = render(headers, rows, aligns)
    if len(devices) > 1:
        text += (f"\n\n{first}/X: median time on {first} divided by the time on X "
                 f"(below 1: {first} is faster). ±%, GFLOP/s and GB/s on {first} "
                 f"(±%: half the interquartile range over the median). "
                 f"'ok (by f64)': outside the dtype's tolerance of {first}, but no further "
                 f"from a float64 CPU result than {first} (within 2x).")
    if notes:
        text += "\n\nProblems:\n" + "\n".join(f"  {n}" for n in notes)
    return text


def _p(v):
    if isinstance(v, list):
        return "x".join(map(str, v)) if v else "()"
    return str(v)


def summary_line(results: list[dict]) -> str:
    counts = defaultdict(int)
    for r in results:
        counts[r["status"]] += 1
    return ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))


# ---------------------------------------------------------------- files
def write_json(path: str, stack: dict, settings: dict, devices: list[str], results: list[dict]):
    doc = {"schema": SCHEMA, "stack": stack, "settings": settings, "devices": devices,
           "results": results}
    _mkdir(path)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")


def load_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "results" not in doc:
        raise ValueError(f"{path}: not a torch_musa.op_benchmark result file (no 'results')")
    return doc


CSV_FIELDS = ["id", "suite", "op", "params", "dtype", "mode", "device", "status", "checked",
              "max_err", "median_s", "mean_s", "min_s", "p10_s", "p25_s", "p75_s", "p90_s",
              "stdev_s", "blocks", "block_size", "calls", "rounds", "rotations", "flops", "bytes",
              "gflops", "gbps", "timer", "error"]


def write_csv(path: str, results: list[dict]):
    _mkdir(path)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in results:
            row = dict(r)
            row["params"] = ";".join(f"{k}={_p(v)}" for k, v in (r.get("params") or {}).items())
            w.writerow(row)


def _mkdir(path):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)


def per_op_ratios(results: list[dict], base: str, other: str) -> "OrderedDict[str, tuple[float, int]]":
    """Geometric mean over each op's tests of time(base)/time(other)."""
    logs = OrderedDict()
    for tid, by_dev in group_by_test(results).items():
        q = ratio(by_dev.get(base), by_dev.get(other))
        if q:
            op = next(iter(by_dev.values()))["op"]
            logs.setdefault(op, []).append(math.log(q))
    return OrderedDict((op, (math.exp(sum(v) / len(v)), len(v))) for op, v in logs.items())


def plot_ratios(path: str, ratios: "dict[str, tuple[float, int]]", title: str, xlabel: str):
    """A horizontal bar chart, log scale, of one ratio per op."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    items = sorted(ratios.items(), key=lambda kv: kv[1][0])
    if not items:
        items = [("(no comparable results)", (1.0, 0))]
    names = [f"{k} ({n})" for k, (_, n) in items]
    vals = [v for _, (v, _) in items]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * len(items) + 1.2)))
    colors = ["tab:green" if v < 1 else "tab:red" for v in vals]
    ax.barh(range(len(vals)), [v - 1.0 for v in vals], color=colors, left=1.0)  # from the 1x line
    ax.set_xscale("log")
    lo, hi = min(vals + [1.0]), max(vals + [1.0])
    ticks = [2.0 ** k for k in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(ticks[0] / 1.1, ticks[-1] * 1.1)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(vals)))
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.2f}x " if v >= 1 else f"{v:.2f}x ", va="center", fontsize=7,
                ha="left" if v >= 1 else "right")
    fig.tight_layout()
    _mkdir(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- compare
def compare_results(a: dict, b: dict) -> list[dict]:
    """Join two result files on (test id, device); when each file ran a different single
    device, join on the test id alone. ratio = B / A (above 1: B is slower)."""
    ra, rb = a["results"], b["results"]
    da = sorted({r["device"] for r in ra})
    db = sorted({r["device"] for r in rb})
    by_device = bool(set(da) & set(db))
    key = (lambda r: (r["id"], r["device"])) if by_device else (lambda r: (r["id"], None))
    ib = {key(r): r for r in rb}
    rows = []
    for r in ra:
        other = ib.get(key(r))
        if other is None:
            continue
        q = ratio(other, r)
        rows.append({"id": r["id"], "op": r["op"], "params": r.get("params"), "dtype": r["dtype"],
                     "mode": r["mode"], "device_a": r["device"], "device_b": other["device"],
                     "status_a": r["status"], "status_b": other["status"],
                     "median_a_s": r.get("median_s"), "median_b_s": other.get("median_s"),
                     "ratio": q})
    return rows


def compare_table(rows: list[dict], label_a: str, label_b: str) -> str:
    headers = ["test", "dtype", "mode", "device", f"A: {label_a}", f"B: {label_b}", "B/A"]
    body = []
    for r in rows:
        name = r["op"] + ("/" + ",".join(f"{k}={_p(v)}" for k, v in r["params"].items())
                          if r.get("params") else "")
        dev = r["device_a"] if r["device_a"] == r["device_b"] else f"{r['device_a']}|{r['device_b']}"
        ta = fmt_time(r["median_a_s"]) if r["status_a"] == "ok" else r["status_a"].upper()
        tb = fmt_time(r["median_b_s"]) if r["status_b"] == "ok" else r["status_b"].upper()
        body.append([name, r["dtype"], r["mode"], dev, ta, tb,
                     "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"])
    text = render(headers, body, ["<", "<", "<", "<", ">", ">", ">"])
    qs = [r["ratio"] for r in rows if r["ratio"]]
    if qs:
        gm = math.exp(sum(math.log(q) for q in qs) / len(qs))
        text += f"\n\n{len(qs)} tests in both; geometric mean B/A = {gm:.3f}x (above 1: B is slower)"
    else:
        text += "\n\nno test timed successfully in both files"
    return text


def compare_op_ratios(rows: list[dict]) -> "OrderedDict[str, tuple[float, int]]":
    logs = OrderedDict()
    for r in rows:
        if r["ratio"]:
            logs.setdefault(r["op"], []).append(math.log(r["ratio"]))
    return OrderedDict((op, (math.exp(sum(v) / len(v)), len(v))) for op, v in logs.items())


def eprint(*a):
    print(*a, file=sys.stderr)

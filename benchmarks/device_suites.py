"""PyTorch's own device-generic test suites on musa, with the CPU as baseline.

    .venv/bin/python benchmarks/device_suites.py --pytorch /work/pytorch_tests --sample 40
    .venv/bin/python benchmarks/device_suites.py --pytorch PATH --files test_view_ops.py,test_indexing.py
    .venv/bin/python benchmarks/device_suites.py --pytorch PATH --files test_ops.py -k "test_out and add" --sample 0

``--pytorch`` is a directory holding PyTorch's ``test/`` folder (a checkout of
PyTorch's repository, or just its ``test/``); the files are not in the wheel.
Each file runs twice, in fresh processes: once for ``cpu`` and once for the
PrivateUse1 device (``PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1``; autoload
makes musa PyTorch's ``PrivateUse1TestBase``). Test ids are collected on both
devices (``--collect-only``, cached), paired by mapping the device suffixes
(``TestFooCPU::test_bar_cpu_float32`` <-> ``TestFooMUSA::test_bar_musa_float32``),
and ``--sample K`` takes the same K pairs on both devices, chosen by a hash of
the id (deterministic, spread over the whole file).

Each run writes pytest's junit XML and, through ``device_suites_plugin``, one
JSON line per test as it finishes, so a crash or a time limit loses only the
test it happened in: the runner records that test as ``crash``/``timeout``
and starts a new process for the rest.

The report separates the tests that pass on CPU and fail on musa into classes
(wrong value, missing kernel, wrong error type/text, device-specific
decorator/skip, hang/timeout, crash, other) and matches them against
``benchmarks/device_suites_xfail.yaml`` (known differences, grouped by
reason). Outputs: ``benchmarks/results/device_suites.{md,json,png}``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_FILES = [
    "test_ops.py", "test_nn.py", "test_torch.py", "test_modules.py",
    "test_binary_ufuncs.py", "test_unary_ufuncs.py", "test_reductions.py",
    "test_indexing.py", "test_view_ops.py", "test_shape_ops.py",
    "test_sort_and_select.py", "test_tensor_creation_ops.py",
    "test_type_promotion.py", "test_linalg.py", "test_foreach.py",
    "test_optim.py", "test_autograd.py", "test_serialization.py",
    "test_scatter_gather.py", "test_segment_reductions.py", "test_complex.py",
    "test_spectral_ops.py", "test_numba_integration.py", "test_dlpack.py",
    "test_nestedtensor.py", "test_masked.py", "test_prims.py",
]
DEVICES = ("cpu", "musa")
CLASSES = (
    "wrong value", "missing kernel", "wrong error type/text",
    "device-specific decorator/skip", "hang/timeout", "crash", "other error",
)


def log(msg: str) -> None:
    print(f"[device_suites {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- ids

_CLS_RE = {"cpu": re.compile(r"CPU::"), "musa": re.compile(r"(?:MUSA|PRIVATEUSE1)::")}
_FN_RE = {"cpu": re.compile(r"_cpu(?=(_|$|\[))"), "musa": re.compile(r"_(?:musa|privateuse1)(?=(_|$|\[))")}


def normalize(nodeid: str, device: str) -> str:
    """The id with the device spelled ``DEV``, the same on both devices."""
    cls_fn = nodeid.split("::")
    if len(cls_fn) < 3:
        return nodeid
    path, cls, fn = cls_fn[0], "::".join(cls_fn[1:-1]), cls_fn[-1]
    cls = _CLS_RE[device].sub("DEV::", cls + "::")[:-2]
    matches = list(_FN_RE[device].finditer(fn))
    if matches:  # the last one is the device suffix (op names come before it)
        m = matches[-1]
        fn = fn[: m.start()] + "_DEV" + fn[m.end():]
    return f"{path}::{cls}::{fn}"


def sample_key(key: str, seed: str) -> str:
    return hashlib.sha1(f"{seed}:{key}".encode()).hexdigest()


# ---------------------------------------------------------------- processes

def device_env(device: str, args) -> dict:
    env = dict(os.environ)
    env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "cpu" if device == "cpu" else "privateuse1"
    env["TORCH_MUSA_PROFILE"] = args.profile
    if args.double_cast:
        env["TORCH_USE_MUSA_DOUBLE_CAST"] = "1"
    env["TORCH_MUSA_FALLBACK"] = "silent"
    # Same MKL code path on both devices (DESIGN: AVX-512 paths differ by an ulp otherwise).
    env.setdefault("MKL_CBWR", "COMPATIBLE")
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTORCH_TEST_WITH_SLOW", None)
    if not args.compat:
        env["DEVICE_SUITES_COMPAT"] = "0"
    return env


def pytest_base(args) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "device_suites_plugin", "-p", "no:cacheprovider",
           "-q", "-rN", "--no-header", "-o", "addopts=", "-W", "ignore"]
    if not args.conftest:
        cmd.append("--noconftest")
    return cmd


def collect(test_file: str, device: str, args, cache_dir: Path) -> tuple[list[str], str]:
    src = Path(args.pytorch) / "test" / test_file
    stamp = f"{src.stat().st_mtime_ns}:{args.k or ''}:{args.profile}:{int(args.compat)}"
    cache = cache_dir / f"{test_file}.{device}.ids.json"
    if cache.exists():
        data = json.loads(cache.read_text())
        if data.get("stamp") == stamp:
            return data["ids"], data.get("error", "")
    cmd = pytest_base(args) + ["--collect-only", test_file]
    if args.k:
        cmd += ["-k", args.k]
    t0 = time.perf_counter()
    for attempt in range(2):  # a busy machine has killed a collection now and then: try twice
        try:
            p = subprocess.run(cmd, cwd=Path(args.pytorch) / "test", env=device_env(device, args),
                               capture_output=True, text=True, timeout=args.collect_timeout)
            out, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc = "timeout"
        ids = [line.strip() for line in out.splitlines() if "::" in line and not line.startswith(" ")
               and not line.startswith(("E ", "ERROR"))]
        if ids or rc in (2, 4, 5):  # collection error, usage error or no tests: final
            break
    error = ""
    if not ids:
        tail = [ln for ln in out.splitlines() if ln.startswith("E ") or "Error" in ln]
        error = (tail[0] if tail else (out.strip().splitlines()[-1:] or [f"no tests (exit {rc})"])[0])[:300]
        log(f"{test_file} on {device}: no ids (exit {rc}): {error}")
    if ids or rc in (2, 4, 5):
        cache.write_text(json.dumps({"stamp": stamp, "ids": ids, "error": error}))
    log(f"collected {test_file} on {device}: {len(ids)} ids in {time.perf_counter() - t0:.1f}s")
    return ids, error


def run_ids(test_file: str, device: str, ids: list[str], args, work: Path) -> dict:
    """Run ``ids`` in as few processes as crashes allow; returns {id: record}."""
    results: dict[str, dict] = {}
    remaining = list(ids)
    attempt = 0
    wall = 0.0
    if args.resume:  # keep what an earlier run of the same work directory finished
        for path in sorted(work.glob(f"{test_file}.{device}.*.jsonl")):
            for line in path.read_text().splitlines():
                rec = json.loads(line) if line.startswith("{") else {}
                if rec.get("id") in remaining:
                    results[rec["id"]] = rec
        remaining = [i for i in remaining if i not in results]
        attempt = len(list(work.glob(f"{test_file}.{device}.*.jsonl")))
        wall_file = work / f"{test_file}.{device}.wall"
        wall = float(wall_file.read_text()) if wall_file.exists() else 0.0
        if not remaining:
            return {**results, "__wall__": {"wall": wall, "processes": 0, "resumed": True}}
    while remaining and attempt <= args.restarts:
        tag = f"{test_file}.{device}.{attempt}"
        log_path = work / f"{tag}.jsonl"
        argfile = work / f"{tag}.args"
        log_path.unlink(missing_ok=True)
        argfile.write_text("\n".join(remaining) + "\n")
        cmd = pytest_base(args) + [f"--junitxml={work / (tag + '.xml')}", f"@{argfile}"]
        if args.test_timeout:
            cmd += [f"--timeout={args.test_timeout}", "--timeout-method=signal"]
        env = device_env(device, args)
        env["DEVICE_SUITES_LOG"] = str(log_path)
        budget = max(30.0, args.file_timeout - wall)
        t0 = time.perf_counter()
        killed = False
        with open(work / f"{tag}.out", "w") as out:
            try:
                p = subprocess.run(cmd, cwd=Path(args.pytorch) / "test", env=env, stdout=out,
                                   stderr=subprocess.STDOUT, timeout=budget)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc, killed = None, True
        wall += time.perf_counter() - t0
        started = None
        if log_path.exists():
            for line in log_path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if "start" in rec:
                    started = rec["start"]
                elif "id" in rec:
                    results[rec["id"]] = rec
                    if started == rec["id"]:
                        started = None
        remaining = [i for i in remaining if i not in results]
        if not remaining:
            break
        if started is not None and started in remaining:
            what = "timeout" if killed else "crash"
            msg = (f"process killed after the file's {args.file_timeout:.0f}s limit" if killed
                   else f"process died (exit {rc}) in this test")
            results[started] = {"id": started, "outcome": what, "message": msg}
            remaining.remove(started)
        elif not killed and rc not in (0, 1) and not results and attempt < 2:
            # Nothing ran at all (seen: torch_musa failing to import, or a segfault during
            # collection, while the extension was being rebuilt in the same tree): try again.
            log(f"{test_file} {device}: pytest exit {rc} before any test; trying again in 60 s")
            time.sleep(60)
        elif not killed and rc not in (0, 1):
            # Nothing ran: a usage or collection error. Record it for all.
            tail = (work / f"{tag}.out").read_text().strip().splitlines()[-1:] or [""]
            for i in remaining:
                results[i] = {"id": i, "outcome": "error", "message": f"pytest exit {rc}: {tail[0][:200]}"}
            remaining = []
        if killed:
            for i in remaining:
                results[i] = {"id": i, "outcome": "notrun", "message": "file time limit reached"}
            remaining = []
        attempt += 1
    for i in remaining:
        results[i] = {"id": i, "outcome": "notrun", "message": "too many crashes"}
    (work / f"{test_file}.{device}.wall").write_text(f"{wall:.2f}\n")
    results["__wall__"] = {"wall": round(wall, 2), "processes": attempt + (0 if remaining else 1)}
    return results


# ---------------------------------------------------------------- classification

_BY_DESIGN = re.compile(r"Only runs on|onlyNativeDeviceTypes|Skipped! Only|not in .*device_type|"
                        r"Only runs on native|doesn't run on|Runs only on", re.I)
_MISSING = re.compile(
    r"NotImplementedError|not implemented for|Could not run '|no kernel|does not support|"
    r"is not supported|not available for|unsupported device|PrivateUse1|no attribute '(?:musa|privateuse1)", re.I)
_ERRTEXT = re.compile(
    r"not raised|Regex|does not match|didn't match|DID NOT RAISE|Expected .*Error when|"
    r"expected .* to be raised|No exception|warning not|Warning not", re.I)
_VALUE = re.compile(
    r"not close|not equal|Mismatched elements|Greatest (absolute|relative) difference|"
    r"Scalars are not|Booleans mismatch|Tensor-likes|mismatch|!=|assert.*==|is not true|is not false|"
    r"False is not|True is not|The values for attribute|First sequence|Lists differ|Tuples differ", re.I)


def classify(cpu: dict, dev: dict) -> str:
    out, msg = dev.get("outcome"), dev.get("message", "") or ""
    if out == "timeout" or "Timeout" in msg:
        return "hang/timeout"
    if out == "crash":
        return "crash"
    if out in ("skipped", "xfailed"):
        return "device-specific decorator/skip"
    if out == "xpassed":
        return "device-specific decorator/skip"
    if _ERRTEXT.search(msg):  # before "missing": an expected error's text may say "not supported"
        return "wrong error type/text"
    if _MISSING.search(msg):
        return "missing kernel"
    if _VALUE.search(msg) or msg.startswith("AssertionError"):
        return "wrong value"
    return "other error"


def load_known(path: Path) -> list[dict]:
    if not path.exists():
        return []
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    reasons = []
    for name, spec in (data.get("reasons") or {}).items():
        reasons.append({
            "name": name,
            "why": spec.get("why", ""),
            "ids": [re.compile(p) for p in spec.get("ids", [])],
            "messages": [re.compile(p) for p in spec.get("messages", [])],
            "owner": spec.get("owner", "musa"),
        })
        if reasons[-1]["owner"] not in ("musa", "test"):
            raise ValueError(f"{path}: {name}: owner must be 'musa' or 'test'")
    return reasons


def match_known(key: str, message: str, reasons: list[dict]) -> str | None:
    for r in reasons:
        id_ok = not r["ids"] or any(p.search(key) for p in r["ids"])
        msg_ok = not r["messages"] or any(p.search(message or "") for p in r["messages"])
        if (r["ids"] or r["messages"]) and id_ok and msg_ok:
            return r["name"]
    return None


# ---------------------------------------------------------------- report

def summarize(per_file: dict, diffs: list[dict] = (), owners: dict | None = None) -> dict:
    owners = owners or {}
    rows = []
    for f, d in per_file.items():
        counts = {}
        for dev in DEVICES:
            recs = [r for k, r in d["results"][dev].items()]
            c = {o: 0 for o in ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "crash", "timeout", "notrun")}
            for r in recs:
                c[r["outcome"]] = c.get(r["outcome"], 0) + 1
            c["ran"] = len(recs)
            counts[dev] = c
        cpu_pass = [k for k, r in d["results"]["cpu"].items() if r["outcome"] == "passed"]
        both = [k for k in cpu_pass if d["results"]["musa"].get(k, {}).get("outcome") == "passed"]
        # Tests a device decorator (onlyCPU, onlyNativeDeviceTypes, dtypesIfCPU...) skips on musa by design.
        by_design = {k for k in cpu_pass if d["results"]["musa"].get(k, {}).get("outcome") == "skipped"
                     and _BY_DESIGN.search(d["results"]["musa"][k].get("message", "") or "")}
        # Differences a reason marks `owner: test`: the test expects the CPU's or CUDA's own
        # answer from every other device, which no third device gives (musa answers as CUDA).
        test_owned = [x for x in diffs if x["file"] == f and owners.get(x["known"]) == "test"
                      and x["key"] not in by_design]
        musa_part = len(cpu_pass) - len(by_design) - len(test_owned)
        rows.append({
            "file": f, "collected": d["collected"], "sampled": d["sampled"],
            "cpu": counts["cpu"], "musa": counts["musa"],
            "cpu_passed": len(cpu_pass), "musa_passed_of_cpu_passed": len(both),
            "rate": (len(both) / len(cpu_pass)) if cpu_pass else None,
            "skipped_by_design": len(by_design),
            "rate_runnable": (len(both) / (len(cpu_pass) - len(by_design))) if len(cpu_pass) > len(by_design) else None,
            "test_owned": len(test_owned),
            "rate_musa_part": (len(both) / musa_part) if musa_part > 0 else None,
            "wall": d["wall"], "error": d.get("error", ""),
            "test_s": {dev: round(sum(r.get("duration", 0) or 0 for r in d["results"][dev].values()), 2)
                       for dev in DEVICES},
        })
        r = rows[-1]
        spent = r["test_s"]["cpu"] + r["test_s"]["musa"]
        # A whole file on both devices: its tests at the sampled mean time, plus the processes' start-up.
        r["full_run_estimate_s"] = round(spent / max(1, r["sampled"]) * r["collected"]
                                         + max(0.0, r["wall"] - spent), 0)
    return rows


def write_reports(state: dict, out_dir: Path, stem: str) -> None:
    diffs = state["differences"]
    rows = summarize(state["files"], diffs, state.get("reason_owners"))
    tot_cpu = sum(r["cpu_passed"] for r in rows)
    tot_both = sum(r["musa_passed_of_cpu_passed"] for r in rows)
    tot_design = sum(r["skipped_by_design"] for r in rows)
    tot_owned = sum(r["test_owned"] for r in rows)
    state["summary"] = {
        "cpu_passed": tot_cpu, "musa_passed_of_cpu_passed": tot_both,
        "rate": tot_both / tot_cpu if tot_cpu else None,
        "skipped_by_design": tot_design,
        "rate_runnable": tot_both / (tot_cpu - tot_design) if tot_cpu > tot_design else None,
        "test_owned": tot_owned,
        "rate_musa_part": (tot_both / (tot_cpu - tot_design - tot_owned)
                           if tot_cpu > tot_design + tot_owned else None),
        "lowest_file_rate_musa_part": min((r["rate_musa_part"] for r in rows if r["rate_musa_part"] is not None),
                                          default=None),
        "differences": len(diffs),
        "known": sum(1 for d in diffs if d["known"] is not None),
        "new": sum(1 for d in diffs if d["known"] is None),
        "by_class": {c: sum(1 for d in diffs if d["class"] == c) for c in CLASSES},
    }
    state["rows"] = rows
    (out_dir / f"{stem}.json").write_text(json.dumps(
        {k: v for k, v in state.items() if k != "files"}, indent=1) + "\n")

    regen = (f" (report regenerated {state['report_regenerated']} UTC from that run's results)"
             if state.get("report_regenerated") else "")
    if state.get("resumed_sessions"):
        regen += f"; run in {state['resumed_sessions']} sessions (--resume), wall time summed"
    md = [f"# PyTorch device-generic suites on musa vs CPU\n",
          f"Run: {state['started']} UTC, {state['wall_s'] / 60:.1f} min wall on {state['host']}; "
          f"tests from `{state['pytorch']}` ({state['pytorch_commit']}); torch {state['torch']}; "
          f"profile `{state['profile']}`, TORCH_USE_MUSA_DOUBLE_CAST={int(state['double_cast'])}; "
          f"sample {state['sample'] or 'all'} ids per file (same ids on both devices), "
          f"per-test limit {state['test_timeout']}s{regen}.\n",
          "`musa ok` = tests that pass on CPU and also pass on musa, out of those that pass on CPU.\n",
          "`% runnable` leaves out the CPU-passing tests that a device decorator of the test "
          "itself (`onlyCPU`, `onlyNativeDeviceTypes`, ...) skips on any non-native device.\n",
          "`% musa's part` leaves out, besides, the tests that fail on musa for a reason "
          "`device_suites_xfail.yaml` marks `owner: test`: the test expects the CPU's or CUDA's own "
          "answer from every other device (a `device == 'cuda'` branch, CUDA's name in an error text, "
          "a device list in the test's helpers), and musa gives CUDA's answer; each reason says how "
          "that was checked. Every other difference is musa's to fix.\n",
          "| file | device-generic ids | sampled | CPU pass/fail/skip | musa pass/fail/skip | CPU-passing | also musa | % | skipped by design | % runnable | test's own assumption | % musa's part | wall s |",
          "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        c, m = r["cpu"], r["musa"]
        cf = c["failed"] + c["error"] + c["crash"] + c["timeout"]
        mf = m["failed"] + m["error"] + m["crash"] + m["timeout"]
        rate = f"{100 * r['rate']:.1f}" if r["rate"] is not None else "–"
        rr = f"{100 * r['rate_runnable']:.1f}" if r["rate_runnable"] is not None else "–"
        rm = f"{100 * r['rate_musa_part']:.1f}" if r["rate_musa_part"] is not None else "–"
        note = f" ({r['error']})" if r["error"] and not r["sampled"] else ""
        md.append(f"| {r['file']}{note} | {r['collected']} | {r['sampled']} | {c['passed']}/{cf}/{c['skipped'] + c['xfailed']} "
                  f"| {m['passed']}/{mf}/{m['skipped'] + m['xfailed']} | {r['cpu_passed']} | "
                  f"{r['musa_passed_of_cpu_passed']} | {rate} | {r['skipped_by_design']} | {rr} | "
                  f"{r['test_owned']} | {rm} | {r['wall']:.0f} |")
    s = state["summary"]
    if s["rate"] is not None:
        md.append(f"| **all** | | | | | **{tot_cpu}** | **{tot_both}** | **{100 * s['rate']:.1f}** | "
                  f"{s['skipped_by_design']} | **{100 * s['rate_runnable']:.1f}** | {s['test_owned']} | "
                  f"**{100 * s['rate_musa_part']:.1f}** | |")
    est = sum(r["full_run_estimate_s"] for r in rows)
    md.append(f"\nCollecting the ids took {state.get('collect_s', 0) / 60:.1f} min (cached between runs). "
              f"A run of every device-generic test of these "
              f"files on both devices would take about {est / 3600:.1f} h of test time at this sample's mean "
              f"per-test time (see `full_run_estimate_s` in the JSON; the heavy OpInfo files dominate).")
    md.append("")
    md.append(f"## Pass on CPU, fail on musa: {len(diffs)} ({s['known']} known, {s['new']} new)\n")
    md.append("| class | count | known | new |\n| --- | ---: | ---: | ---: |")
    for c in CLASSES:
        n = [d for d in diffs if d["class"] == c]
        if n:
            md.append(f"| {c} | {len(n)} | {sum(d['known'] is not None for d in n)} | {sum(d['known'] is None for d in n)} |")
    md.append("")
    reasons = {}
    for d in diffs:
        reasons.setdefault(d["known"] or "(new)", []).append(d)
    md.append("| reason (device_suites_xfail.yaml) | owner | count | classes |\n| --- | --- | ---: | --- |")
    for name, ds in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        cls = ", ".join(f"{c} {n}" for c, n in sorted(
            {c: sum(1 for d in ds if d["class"] == c) for c in CLASSES}.items(), key=lambda kv: -kv[1]) if n)
        owner = (state.get("reason_owners") or {}).get(name, "musa" if name != "(new)" else "")
        md.append(f"| {name} | {owner} | {len(ds)} | {cls} |")
    md.append("")
    for title, sel in (("New differences", lambda d: d["known"] is None),
                       ("Known differences (device_suites_xfail.yaml)", lambda d: d["known"] is not None)):
        items = [d for d in diffs if sel(d)]
        design = [d for d in items if d["outcome"] == "skipped" and _BY_DESIGN.search(d["message"] or "")]
        if design and len(design) < len(items):  # the long tail of by-design skips is in the JSON
            items = [d for d in items if d not in design]
            title += f"; {len(design)} more skipped by the test's own decorator are in the JSON"
        if not items:
            continue
        md.append(f"### {title}\n")
        md.append("| test (musa id) | class | known reason | first error line |\n| --- | --- | --- | --- |")
        for d in sorted(items, key=lambda d: (d["class"], d["id"])):
            msg = (d["message"] or "").replace("|", "\\|")[:220]
            md.append(f"| `{d['id']}` | {d['class']} | {d['known'] or ''} | {msg} |")
        md.append("")
    shims = state.get("shims") or []
    if shims:
        md.append("Compatibility shims used to import this checkout with the installed torch "
                  "(same on both devices): " + ", ".join(f"`{x}`" for x in shims) + ".\n")
    (out_dir / f"{stem}.md").write_text("\n".join(md) + "\n")
    try:
        plot(rows, out_dir / f"{stem}.png", state)
    except Exception as e:  # the chart is a convenience
        log(f"no chart: {e}")


def plot(rows, path: Path, state: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["cpu_passed"]]
    rows.sort(key=lambda r: r["rate"])
    diffs = state["differences"]
    fig, ax = plt.subplots(figsize=(9, 0.38 * len(rows) + 2.3))
    names = [r["file"] for r in rows]
    ok = [100 * r["rate"] for r in rows]
    design, known, new = [], [], []
    for r in rows:
        ds = [d for d in diffs if d["file"] == r["file"]]
        by_design = [d for d in ds if d["outcome"] == "skipped" and _BY_DESIGN.search(d["message"] or "")]
        design.append(100 * len(by_design) / r["cpu_passed"])
        known.append(100 * sum(d["known"] is not None for d in ds if d not in by_design) / r["cpu_passed"])
        new.append(100 * sum(d["known"] is None for d in ds if d not in by_design) / r["cpu_passed"])
    ax.barh(names, ok, color="#4c9a2a", label="also passes on musa")
    ax.barh(names, design, left=ok, color="#b0b0b0", label="skipped on musa by the test's decorator")
    left = [a + b for a, b in zip(ok, design)]
    ax.barh(names, known, left=left, color="#e0b040", label="fails on musa: known reason")
    left = [a + b for a, b in zip(left, known)]
    ax.barh(names, new, left=left, color="#c03030", label="fails on musa: new")
    for i, r in enumerate(rows):
        ax.text(101, i, f"{100 * r['rate']:.1f}% of {r['cpu_passed']}", va="center", fontsize=8)
    ax.set_xlim(0, 125)
    ax.set_xlabel("% of the sampled tests that pass on CPU")
    ax.set_title(f"PyTorch device-generic suites: musa ({state['profile']}) vs CPU, "
                 f"sample {state['sample'] or 'all'}/file")
    ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.09 - 0.3 / max(1, len(rows))), ncol=2, fontsize=8,
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main

def git_commit(pytorch: Path) -> str:
    marker = pytorch / "COMMIT"
    if marker.exists():
        return marker.read_text().strip()
    try:
        return subprocess.run(["git", "-C", str(pytorch), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pytorch", required=True, help="directory holding PyTorch's test/ folder")
    ap.add_argument("--files", default=",".join(DEFAULT_FILES[:18]),
                    help="comma-separated test files (default: the 18 core device-generic files)")
    ap.add_argument("-k", default=None, help="pytest -k expression applied when collecting")
    ap.add_argument("--sample", type=int, default=40, help="test ids per file, 0 = all (default 40)")
    ap.add_argument("--seed", default="0", help="changes which ids a sample takes")
    ap.add_argument("--profile", default="s4000", help="TORCH_MUSA_PROFILE for the musa run")
    ap.add_argument("--no-double-cast", dest="double_cast", action="store_false",
                    help="do not set TORCH_USE_MUSA_DOUBLE_CAST=1")
    ap.add_argument("--jobs", type=int, default=1, help="test processes at once (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per process")
    ap.add_argument("--test-timeout", type=float, default=120, help="seconds per test (pytest-timeout)")
    ap.add_argument("--file-timeout", type=float, default=900, help="seconds per file and device")
    ap.add_argument("--collect-timeout", type=float, default=300)
    ap.add_argument("--restarts", type=int, default=5, help="new processes after crashes, per file/device")
    ap.add_argument("--no-compat", dest="compat", action="store_false",
                    help="no import shims for a checkout of another PyTorch release")
    ap.add_argument("--conftest", action="store_true", help="load PyTorch's test/conftest.py")
    ap.add_argument("--xfail", default=str(HERE / "device_suites_xfail.yaml"))
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--name", default="device_suites", help="stem of the output files")
    ap.add_argument("--work", default=None, help="scratch directory (default /tmp/device_suites)")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the results the work directory already holds; run only the rest")
    args = ap.parse_args(argv)

    pytorch = Path(args.pytorch).resolve()
    args.pytorch = str(pytorch)
    if not (pytorch / "test").is_dir():
        ap.error(f"{pytorch}/test is not a directory")
    files = [f.strip() for f in args.files.split(",") if f.strip()]
    files = [f for f in files if (pytorch / "test" / f).exists() or log(f"skip {f}: not in checkout")]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(args.work or "/tmp/device_suites")
    work.mkdir(parents=True, exist_ok=True)
    cache_dir = work / "ids"
    cache_dir.mkdir(exist_ok=True)
    reasons = load_known(Path(args.xfail))

    import platform

    import torch

    state = {
        "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "host": f"{platform.node() or 'host'}, {os.cpu_count()} cores",
        "pytorch": str(pytorch), "pytorch_commit": git_commit(pytorch),
        "torch": f"{torch.__version__} ({torch.version.git_version[:12]})",
        "profile": args.profile, "double_cast": args.double_cast, "sample": args.sample,
        "seed": args.seed, "test_timeout": args.test_timeout, "files": {}, "differences": [],
        "shims": [], "reason_owners": {r["name"]: r["owner"] for r in reasons},
    }
    t_start = time.perf_counter()

    # Collect (both devices) and sample.
    plans = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        collected = dict(zip([(f, d) for f in files for d in DEVICES],
                             pool.map(lambda fd: collect(fd[0], fd[1], args, cache_dir),
                                      [(f, d) for f in files for d in DEVICES])))
    for f in files:
        ids = {}
        err = ""
        for dev in DEVICES:
            ids[dev], e = collected[(f, dev)]
            err = err or e
        by_key = {dev: {normalize(i, dev): i for i in ids[dev]} for dev in DEVICES}
        # Device-generic tests only: ids without a device suffix (plain TestCase classes in the
        # same files) run the same code in both processes and say nothing about musa.
        common = sorted((k for k in set(by_key["cpu"]) & set(by_key["musa"]) if "DEV::" in k),
                        key=lambda k: sample_key(k, args.seed))
        chosen = common[: args.sample] if args.sample else common
        plans[f] = {"by_key": by_key, "chosen": chosen, "collected": len(common),
                    "collected_all": len(ids["cpu"]),
                    "only_cpu": len(set(by_key["cpu"]) - set(by_key["musa"])),
                    "only_musa": len(set(by_key["musa"]) - set(by_key["cpu"])), "error": err}
        if err and not ids["cpu"]:
            log(f"{f}: not collected: {err}")

    jobs = [(f, dev) for f in files for dev in DEVICES if plans[f]["chosen"]]
    t_run = time.perf_counter()
    state["collect_s"] = round(t_run - t_start, 1)
    done = 0
    raw: dict[tuple[str, str], dict] = {}

    def one(job):
        f, dev = job
        plan = plans[f]
        ids = [plan["by_key"][dev][k] for k in plan["chosen"]]
        return job, run_ids(f, dev, ids, args, work)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (f, dev), res in pool.map(one, jobs):
            done += 1
            raw[(f, dev)] = res
            n = {o: sum(1 for r in res.values() if r.get("outcome") == o) for o in ("passed", "failed", "skipped")}
            elapsed = time.perf_counter() - t_start
            eta = (time.perf_counter() - t_run) / done * (len(jobs) - done)
            bar = "#" * int(30 * done / len(jobs))
            log(f"[{bar:<30}] {done}/{len(jobs)} {f} {dev}: {n['passed']} passed, {n['failed']} failed, "
                f"{n['skipped']} skipped in {res['__wall__']['wall']:.0f}s; elapsed {elapsed / 60:.1f} min, "
                f"eta {eta / 60:.1f} min")
            for line in (work / f"{f}.{dev}.0.jsonl").read_text().splitlines() if (work / f"{f}.{dev}.0.jsonl").exists() else []:
                if line.startswith('{"shims"'):
                    for s in json.loads(line)["shims"]:
                        if s not in state["shims"]:
                            state["shims"].append(s)

    all_resumed = bool(jobs) and all(raw.get(j, {}).get("__wall__", {}).get("resumed") for j in jobs)
    for f in files:
        plan = plans[f]
        results = {}
        wall = 0.0
        for dev in DEVICES:
            res = raw.get((f, dev), {})
            wall += res.pop("__wall__", {}).get("wall", 0.0)
            inv = {v: k for k, v in plan["by_key"][dev].items()}
            results[dev] = {inv.get(i, i): r for i, r in res.items()}
        state["files"][f] = {"results": results, "collected": plan["collected"],
                             "sampled": len(plan["chosen"]), "wall": wall, "error": plan["error"]}
        for key in plan["chosen"]:
            c, m = results["cpu"].get(key, {}), results["musa"].get(key, {})
            if c.get("outcome") == "passed" and m.get("outcome") != "passed":
                cls = classify(c, m)
                state["differences"].append({
                    "file": f, "id": plan["by_key"]["musa"][key], "key": key, "class": cls,
                    "outcome": m.get("outcome"), "message": m.get("message", ""),
                    "known": match_known(key, m.get("message", ""), reasons),
                })
    state["wall_s"] = time.perf_counter() - t_start
    meta_path = work / "run_meta.json"
    if all_resumed and meta_path.exists():
        # Nothing ran: this is a new report of an earlier run; keep that run's time and date.
        meta = json.loads(meta_path.read_text())
        state["started"], state["wall_s"] = meta["started"], meta["wall_s"]
        if meta.get("sessions", 1) > 1:
            state["resumed_sessions"] = meta["sessions"]
        state["report_regenerated"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    else:
        if args.resume and meta_path.exists():  # an earlier session ran part of this: count both
            meta = json.loads(meta_path.read_text())
            state["started"] = meta["started"]
            state["wall_s"] += meta["wall_s"]
            state["resumed_sessions"] = meta.get("sessions", 1) + 1
        meta_path.write_text(json.dumps({"started": state["started"], "wall_s": state["wall_s"],
                                         "sessions": state.get("resumed_sessions", 1)}))
    state["per_file_plan"] = {f: {k: v for k, v in p.items() if k not in ("by_key", "chosen")} for f, p in plans.items()}
    write_reports(state, out_dir, args.name)
    s = state["summary"]
    rate = f"{100 * s['rate']:.1f}%" if s["rate"] is not None else "n/a"
    log(f"done in {state['wall_s'] / 60:.1f} min: {s['musa_passed_of_cpu_passed']}/{s['cpu_passed']} CPU-passing "
        f"tests pass on musa ({rate}); {s['new']} new and {s['known']} known differences -> {out_dir}/{args.name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The report's sections as titled tables and notes, shared by the text,
Markdown and HTML renderers (each only lays them out)."""
from __future__ import annotations

import dataclasses

from torch_musa.utils.doctor.cards import cards

TOP_OPS = 25


@dataclasses.dataclass
class Section:
    title: str
    notes: list[str]
    headers: list[str] = dataclasses.field(default_factory=list)
    rows: list[list] = dataclasses.field(default_factory=list)


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g} ms"


def _shortener(script: str):
    """Sites under the script's folder shown relative to it."""
    folder = script.rsplit("/", 1)[0] + "/"
    return lambda site: site[len(folder):] if site and site.startswith(folder) else site


def sections(r: dict) -> list[Section]:
    short = _shortener(r["script"])
    out = []
    status = r["status"] if r["status"] != "step limit" else f"stopped after {r['steps_completed']} step(s) (--max-steps)"
    notes = [f"script: {r['script']} {' '.join(r['args'])}".rstrip(),
             f"card: {r['card_name']} (profile {r['profile']}, {r['driver']} driver); run: {status}, "
             f"{r['steps_completed']} optimizer step(s), {r['elapsed_s']:.1f} s on this host"]
    if r["status"] == "failed":
        f, e = r["failure"], r["error"] or {}
        if f:
            notes.append(f"FAILED at op {f['op']} ({', '.join(f['dtypes'])}) from {short(f['site'])}: {f['error']}")
        else:
            where = f" at {short(e['site'])}" if e.get("site") else ""
            notes.append(f"FAILED: {e.get('type')}: {e.get('message')}{where}")
        notes.append("everything below covers the run up to the failure")
    out.append(Section("Run", notes))

    rows = [[o["op"], o["calls"], ",".join(o["dtypes"]), "x".join(map(str, o["largest_shape"])),
             o["here"], o["real_torch_musa"]] for o in r["ops"][:TOP_OPS]]
    missing = [o["op"] for o in r["ops"] if o["real_torch_musa"] != "native" and o["real_torch_musa"] == "CPU fallback"]
    out.append(Section(
        "Ops", [f"{len(r['ops'])} ops dispatched to musa (the first {min(TOP_OPS, len(r['ops']))}: kernels by calls, "
                "then views and metadata). "
                f"'real torch_musa': served natively on release {r['release']} or by its CPU fallback "
                f"({r['release_source']}).",
                f"this project's CPU fallback served: {', '.join(r['fallback_here']) or 'none'}",
                f"would fall back to the CPU on the real torch_musa {r['release']}: {', '.join(missing) or 'none'}"],
        ["op", "calls", "dtypes", "largest shape", "here", "real torch_musa"], rows))

    rows = []
    for key, refused in r["dtypes"].items():
        for x in refused:
            rows.append([cards()[key].name, x["op"], x["dtype"], " ".join(map(short, x["sites"][:3])) or "?",
                         "yes" if x["double_cast_carries"] else "no"])
    notes = ["dtypes a card cannot compute in, where the run used them (ops that only move data pass)."]
    if r["autocast_dtypes"]:
        notes.append(f"musa autocast ran to {', '.join(r['autocast_dtypes'])}: on a card without that dtype "
                     "autocast disables itself (with a warning) and those ops run in float32")
    if r["float64_sites"]:
        notes.append("float64 is computed at: " + ", ".join(map(short, r["float64_sites"][:8])) +
                     " (slow on every MUSA card even where present)")
    notes.append("last column: whether TORCH_USE_MUSA_DOUBLE_CAST=1 (float64 computed in float32) carries it")
    out.append(Section("Dtypes", notes, ["card", "op", "dtype", "user code", "double cast"],
                       rows))

    m = r["memory"]
    rows = [[i + 1, size(s["peak_allocated"]), size(s["peak_reserved"])] for i, s in enumerate(m["per_step"])]
    notes = [f"peak allocated {size(m['peak_allocated'])}, peak reserved {size(m['peak_reserved'])}"]
    for k, f in m["fits"].items():
        why = (f"peak reserved {size(m['peak_reserved'])} of {size(f['capacity'])}" if f["reason"] == "peak reserved"
               else f"out of memory with {size(f['capacity'])}" if f["fits"] is False
               else f"{f['reason']} on a smaller card")
        notes.append(f"{cards()[k].name}: " + {True: "fits", False: "DOES NOT FIT", None: "unknown"}[f["fits"]]
                     + f" ({why})")
    if m["largest_at_peak"]:
        notes.append("largest allocations alive at the peak: " +
                     ", ".join(f"{size(t['bytes'])} ({short(t['site']) or 'library code'})"
                               for t in m["largest_at_peak"][:6]))
    out.append(Section("Memory", notes, ["step", "peak allocated", "peak reserved"], rows))

    s = r["syncs"]
    rows = [[x["what"], short(x["site"]) or "?", x["calls"]] for x in s["sites"][:15]]
    per_step = s["per_step"][:len(m["per_step"])]
    out.append(Section("Synchronisation", [f"{s['total']} host<->device syncs, per step: {per_step} "
                                           "(as torch.musa.set_sync_debug_mode('warn') reports them)"],
                       ["what", "user code", "calls"], rows))

    c = r["converter"]
    rows = [[x["api"], short(x["site"]), x["calls"]] for x in r["cuda_api"]]
    rows += [[f"review: {x['id']}", short(x["site"]), x["title"]] for x in c["review"]]
    out.append(Section("CUDA-isms", [
        "torch.cuda calls the compat layer answered from musa, and what musa-converter asks a person to review",
        "converter rewrites in these files: " + (", ".join(f"{k} x{v}" for k, v in c["rewrites"].items()) or "none")],
        ["api or review item", "where", "calls / why"], rows))

    e = r["estimates"][r["card"]]
    rows = [[o["op"], o["calls"], _ms(o["time_s"]), f"{o['share'] * 100:.0f} %",
             f"{o['flops'] / 1e9:.3g}", size(o["bytes"]), "compute" if o["compute_bound"] * 2 > o["calls"] else "memory"]
            for o in e["ops"][:12]]
    notes = [f"{e['card_name']}: ~{_ms(e['estimate_s'])} per step (band {_ms(e['low_s'])} - {_ms(e['high_s'])}); "
             f"device {_ms(e['device_s'])}, host {_ms(e['host_s'])}: {e['bound']}-bound; from {r['estimate_step']}",
             f"model: {e['model']}", f"peaks: {e['source']}", *e["assumptions"],
             "other cards: " + ", ".join(f"{x['card_name']} ~{_ms(x['estimate_s'])}" for k, x in r["estimates"].items()
                                         if k != r["card"])]
    out.append(Section("Time", notes, ["op", "calls", "time", "share", "GFLOP", "bytes", "bound"], rows))

    out.append(Section("Verdict", [v["line"] for v in r["verdicts"].values()]))
    return out

"""The report: the raw data of a run read against the cards (dtypes they lack,
memory they have, their native ops, their peak throughput), as one dict that
every renderer prints."""
from __future__ import annotations

import torch

from torch_musa.ops.dtype_policy import DTYPE_AGNOSTIC_OPS
from torch_musa.utils.doctor import native_ops, roofline
from torch_musa.utils.doctor.cards import MUSA_CARDS, Card, card, cards

_DOUBLE = ("float64", "complex128")
# Factories PyTorch builds from an allocation and a fill, which only move data.
_FILL_FACTORIES = {"aten::" + n for n in ("zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
                                          "new_zeros", "new_ones", "new_full", "scalar_tensor")}


def _base(op: str) -> str:
    return op.split(".")[0]


def _composite(op: str) -> bool:
    """Whether PyTorch implements ``op`` over other ops for any backend (views, factories,
    decompositions), so that a backend needs no kernel of its own for it."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return has(op, "CompositeImplicitAutograd") or has(op, "CompositeExplicitAutograd")


def _here(op: str, served: set, fallback: set) -> str:
    """How this project served ``op``: its registry, its CPU fallback, or PyTorch's composite."""
    if op in served:
        return "native"
    if op in fallback or _base(op) in fallback:
        return "CPU fallback"
    if _composite(op) and not torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"):
        return "composite"
    return "CPU fallback"


def _real(op: str, release: str) -> str:
    if native_ops.is_native(op, release):
        return "native"
    return "composite" if _composite(op) else "CPU fallback"


def _refusals(raw: dict, c: Card) -> list[dict]:
    """Op/dtype pairs of the run that ``c``'s profile refuses, with the user's lines.

    Ops that launch no kernel, and those that only move data (the runtime's own list,
    ``DTYPE_AGNOSTIC_OPS``, and fill factories) pass, as the runtime lets them."""
    lacking = {str(d).replace("torch.", "") for d in c.unsupported_dtypes}
    out = []
    for op, s in raw["ops"].items():
        if not s.get("kernel", True) or _base(op) in DTYPE_AGNOSTIC_OPS or _base(op) in _FILL_FACTORIES:
            continue
        for d in sorted(set(s["dtypes"]) & lacking):
            sites = sorted({x["site"] for x in s["sites"] if x["dtype"] == d and x["site"]})
            out.append({"op": op, "dtype": d, "sites": sites, "double_cast_carries": d in _DOUBLE})
    f = raw.get("failure")
    if f and "hardware profile" in f["error"] and f["op"] and c.profile == raw["profile"]:
        for d in sorted(set(f["dtypes"]) & lacking):
            if not any(r["op"] == f["op"] and r["dtype"] == d for r in out):
                out.append({"op": f["op"], "dtype": d, "sites": [f["site"]] if f["site"] else [],
                            "double_cast_carries": d in _DOUBLE})
    return out


def _oom(raw: dict) -> bool:
    f = raw.get("failure") or raw.get("error") or {}
    return "out of memory" in (f.get("error") or f.get("message") or "").lower()


def _memory(raw: dict, chosen: Card) -> dict:
    m = raw["memory"]
    peak_alloc = max((s["peak_allocated"] for s in m["per_step"]), default=0)
    peak_res = max((s["peak_reserved"] for s in m["per_step"]), default=0)
    oom = _oom(raw)
    fits = {}
    for key in dict.fromkeys([*MUSA_CARDS, chosen.key]):
        c = cards()[key]
        capacity = m["capacity"] if key == chosen.key else c.memory_bytes
        if oom and capacity <= m["capacity"]:
            fits[key] = {"capacity": capacity, "fits": False, "reason": "out of memory"}
        elif oom:
            fits[key] = {"capacity": capacity, "fits": None, "reason": "the run stopped at out of memory"}
        else:
            fits[key] = {"capacity": capacity, "fits": peak_res <= capacity, "reason": "peak reserved"}
    return {"peak_allocated": peak_alloc, "peak_reserved": peak_res, "per_step": m["per_step"],
            "largest_at_peak": m["largest_at_peak"], "timeline": m["timeline"], "fits": fits, "oom": oom}


def _estimate_step(raw: dict) -> tuple[list, str]:
    steps = raw["steps"]
    done = raw["steps_completed"]
    if done >= 2:
        return steps[done - 1], f"step {done} (the last complete one; step 1 warms up)"
    if done == 1:
        return steps[0], "step 1 (the only complete one, with first-step costs)"
    calls = [c for s in steps for c in s]
    return calls, "the whole run (no optimizer step completed)"


def build(raw: dict, card_key: str = "s4000", release: str | None = None) -> dict:
    """The report of ``raw`` (a worker's data) for ``card_key``, against torch_musa ``release``."""
    chosen = card(card_key)
    release = release or native_ops.latest()
    fallback_here = set(raw["fallback"])
    native_here = set(raw["native_here"])
    ops = []
    # ops that launch kernels first, by calls; views and metadata after them
    for op, s in sorted(raw["ops"].items(), key=lambda kv: (not kv[1].get("kernel", True), -kv[1]["calls"])):
        ops.append({"op": op, "calls": s["calls"], "dtypes": s["dtypes"], "largest_shape": s["largest_shape"],
                    "flops": s["flops"], "bytes": s["bytes"], "kernel": s.get("kernel", True),
                    "real_torch_musa": _real(op, release), "here": _here(op, native_here, fallback_here)})
    calls, which = _estimate_step(raw)
    estimates = {k: roofline.estimate(calls, cards()[k]) for k in dict.fromkeys([*MUSA_CARDS, chosen.key])}
    memory = _memory(raw, chosen)
    dtypes = {k: _refusals(raw, cards()[k]) for k in dict.fromkeys([*MUSA_CARDS, chosen.key])}
    float64_sites = sorted({x["site"] for s in raw["ops"].values() for x in s["sites"]
                            if x["dtype"] in _DOUBLE and x["site"]})
    verdicts = {}
    for k in estimates:
        c = cards()[k]
        problems = []
        if raw["status"] == "failed" and k == chosen.key:
            f, err = raw.get("failure"), raw["error"] or {}
            if f:
                problems.append(f"the run failed at {f['op']} ({f['site'] or 'site unknown'})")
            else:
                where = f" at {err['site']}" if err.get("site") else ""
                problems.append(f"the run failed: {err.get('type')}: {err.get('message')}{where}")
        autocast = set(raw.get("autocast_dtypes", []))
        off = sorted({r["dtype"] for r in dtypes[k]} & autocast)
        bad = [r for r in dtypes[k] if not r["double_cast_carries"] and r["dtype"] not in autocast]
        carried = [r for r in dtypes[k] if r["double_cast_carries"]]
        if off:
            problems.append(f"autocast to {', '.join(off)} turns itself off there (float32 instead, with a warning; "
                            f"run --profile {k} to see the rest)")
        if bad:
            problems.append(f"lacks {', '.join(sorted({r['dtype'] for r in bad}))} "
                            f"({bad[0]['op']} at {bad[0]['sites'][0] if bad[0]['sites'] else '?'})")
        if carried:
            problems.append(f"needs TORCH_USE_MUSA_DOUBLE_CAST=1 for float64 "
                            f"({carried[0]['op']} at {carried[0]['sites'][0] if carried[0]['sites'] else '?'})")
        fit = memory["fits"][k]
        if fit["fits"] is False:
            problems.append("does not fit in its memory")
        e = estimates[k]
        time = f"~{e['estimate_s'] * 1e3:.3g} ms/step ({e['low_s'] * 1e3:.3g}-{e['high_s'] * 1e3:.3g})"
        verdicts[k] = {"ok": not problems and fit["fits"] is not None,
                       "line": f"{c.name}: " + ("; ".join(problems) if problems else
                                                ("runs" if fit["fits"] else "runs; memory fit unknown"))
                               + f"; {time}"}
    return {"script": raw["script"], "args": raw["args"], "status": raw["status"], "error": raw["error"],
            "failure": raw.get("failure"), "card": chosen.key, "card_name": chosen.name, "profile": raw["profile"],
            "driver": raw["driver"], "release": release, "release_source": native_ops.source(),
            "steps_completed": raw["steps_completed"], "max_steps": raw["max_steps"], "elapsed_s": raw["elapsed_s"],
            "ops": ops, "fallback_here": raw["fallback"], "dtypes": dtypes,
            "autocast_dtypes": raw.get("autocast_dtypes", []), "float64_sites": float64_sites,
            "memory": memory, "syncs": raw["syncs"], "cuda_api": raw["cuda_api"], "converter": raw["converter"],
            "estimate_step": which, "estimates": estimates, "verdicts": verdicts}

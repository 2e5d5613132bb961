"""The report's two figures as PNG bytes (matplotlib, no display needed):
estimated time per op on the chosen card, and memory allocated over the run."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

from torch_musa.utils.doctor.cards import cards  # noqa: E402
from torch_musa.utils.doctor.sections import size  # noqa: E402


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def time_per_op(report: dict, top: int = 15) -> bytes:
    e = report["estimates"][report["card"]]
    ops = e["ops"][:top][::-1]
    fig, ax = plt.subplots(figsize=(8, 0.35 * max(len(ops), 3) + 1))
    ax.barh([o["op"].replace("aten::", "") for o in ops], [o["time_s"] * 1e3 for o in ops],
            color=["#c0504d" if o["compute_bound"] * 2 > o["calls"] else "#4f81bd" for o in ops])
    ax.set_xlabel("estimated ms per step (red: compute-bound, blue: memory-bound)")
    ax.set_title(f"Time per op on {e['card_name']} (~{e['estimate_s'] * 1e3:.3g} ms/step)")
    return _png(fig)


def memory_over_run(report: dict) -> bytes:
    m = report["memory"]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    if m["timeline"]:
        xs, ys = zip(*m["timeline"])
        ax.plot(xs, [y / 2**20 for y in ys], color="#4f81bd", label="allocated")
    for s in m["per_step"][:-1]:
        ax.axvline(s["ops_so_far"], color="#999999", lw=0.6, ls=":")
    for key, f in m["fits"].items():
        if f["capacity"] <= 4 * max(m["peak_reserved"], 1):
            ax.axhline(f["capacity"] / 2**20, ls="--", lw=0.8, color="#c0504d")
            ax.text(0, f["capacity"] / 2**20, f" {cards()[key].name}", va="bottom", fontsize=8, color="#c0504d")
    ax.set_xlabel("op index (dotted: step ends)")
    ax.set_ylabel("MiB")
    ax.set_title(f"Device memory over the run (peak {size(m['peak_allocated'])} allocated)")
    return _png(fig)

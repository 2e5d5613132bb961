"""``musa-doctor`` / ``python -m torch_musa.utils.doctor``: run a training script on
the host driver under a card's profile for a few steps and report whether it
runs on MUSA cards and how fast it would be (docs/DOCTOR.md)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from torch_musa.utils.doctor import native_ops, render
from torch_musa.utils.doctor.cards import card, cards
from torch_musa.utils.doctor.report import build


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="musa-doctor", description=(
        "Run a training script on the host driver under a card's profile for a few steps and report "
        "whether it runs on MUSA cards and how fast it would be (docs/DOCTOR.md)."))
    p.add_argument("--profile", default="s4000",
                   help=f"the card to report on: {', '.join(cards())} (default s4000)")
    p.add_argument("--max-steps", type=int, default=3,
                   help="stop the script after this many optimizer.step() calls (0: run to the end; default 3)")
    p.add_argument("--release", default=None,
                   help="the real torch_musa release whose native ops count (default: the newest known)")
    p.add_argument("--device-memory", default=None,
                   help="the card's memory instead of its own (e.g. 2GB): TORCH_MUSA_DEVICE_MEMORY for the run")
    p.add_argument("--double-cast", action="store_true",
                   help="run with TORCH_USE_MUSA_DOUBLE_CAST=1 (float64 computed in float32)")
    p.add_argument("--no-cuda-compat", action="store_true",
                   help="do not turn on torch_musa.cuda_compat (for scripts already converted to musa)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--markdown", metavar="PATH", help="write the report as Markdown")
    p.add_argument("--html", metavar="PATH", help="write the report as a self-contained HTML page")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return p


def run_worker(script: str, args: list[str], c, max_steps: int, device_memory: str | None = None,
               double_cast: bool = False, cuda_compat: bool = True, progress: bool = True) -> dict:
    """The raw data of ``script`` run in a fresh interpreter configured for card ``c``."""
    # The card profiles are the host driver's: a TORCH_MUSA_DRIVER=cuda shell would
    # otherwise run the script on the GPU under the GPU's own profile.
    env = dict(os.environ, TORCH_MUSA_DRIVER="host", TORCH_MUSA_PROFILE=c.profile,
               TORCH_MUSA_FALLBACK="silent")
    if cuda_compat:
        env["TORCH_MUSA_CUDA_COMPAT"] = "1"
    if device_memory:
        env["TORCH_MUSA_DEVICE_MEMORY"] = device_memory
    elif not c.is_musa:     # another vendor's card runs under a MUSA profile, with its own memory
        env["TORCH_MUSA_DEVICE_MEMORY"] = str(c.memory_bytes)
    if double_cast:
        env["TORCH_USE_MUSA_DOUBLE_CAST"] = "1"
    with tempfile.TemporaryDirectory(prefix="musa-doctor-") as tmp:
        out = Path(tmp) / "raw.json"
        cmd = [sys.executable, "-m", "torch_musa.utils.doctor.worker", str(out), str(max_steps),
               "1" if progress else "0", script, *args]
        proc = subprocess.run(cmd, env=env)
        if out.exists():
            return json.loads(out.read_text())
        partial = Path(str(out) + ".partial")
        if not partial.exists():
            raise RuntimeError(f"the run of {script} died (exit status {proc.returncode}) before its first "
                               "step ended: no data to report (its output is above)")
        raw = json.loads(partial.read_text())
        raw["error"]["message"] += f" (exit status {proc.returncode})"
        return raw


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        c = card(a.profile)
        if a.release is not None and a.release not in native_ops.releases():
            raise ValueError(f"unknown torch_musa release {a.release!r}: known {', '.join(native_ops.releases())}")
        if a.max_steps < 0:
            raise ValueError(f"--max-steps must be 0 (no limit) or a positive number, got {a.max_steps}")
        if not os.path.isfile(a.script):
            raise ValueError(f"no such script: {a.script}")
    except ValueError as e:
        print(f"musa-doctor: {e}", file=sys.stderr)
        return 2
    print(f"musa-doctor: running {a.script} under the {c.profile} profile for "
          f"{a.max_steps or 'all'} step(s)...", file=sys.stderr)
    try:
        raw = run_worker(a.script, a.args, c, a.max_steps, a.device_memory, a.double_cast,
                         not a.no_cuda_compat, not a.quiet)
    except RuntimeError as e:
        print(f"musa-doctor: {e}", file=sys.stderr)
        return 1
    report = build(raw, c.key, a.release)
    print(render.text(report))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    if a.markdown:
        Path(a.markdown).write_text(render.markdown(report))
    if a.html:
        from torch_musa.utils.doctor import html_page   # matplotlib loads only for the page
        Path(a.html).write_text(html_page.page(report))
    return 1 if report["status"] == "failed" else 0

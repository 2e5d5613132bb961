"""Start N worker processes of ``tests.distributed._worker`` and collect their results."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from torch_musa.testing.ports import free_port_block

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def launch(scenario: str, world: int, timeout: float = 90, env: dict | None = None):
    """Run ``scenario`` on ``world`` processes; return (per-rank results, elapsed s, outputs).

    A port taken between probing and binding means one more try; a worker reports
    it in its log or, where the scenario caught it, in its result.
    """
    for attempt in range(3):
        results, elapsed, logs = _launch_once(scenario, world, timeout, env)
        if not any("EADDRINUSE" in text for text in logs + [json.dumps(r) for r in results if r]):
            break
    return results, elapsed, logs


def _launch_once(scenario: str, world: int, timeout: float, env: dict | None):
    port = free_port_block(span=40)
    tmp = tempfile.mkdtemp(prefix=f"mccl_{scenario}_")
    out = os.path.join(tmp, "res")
    # Workers dump every thread's stack shortly before the kill, so a hang shows where it waits.
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_MUSA_FALLBACK": "silent",
                "MCCL_TEST_DUMP_AT": str(time.time() + max(1.0, timeout - 5)), **(env or {})}
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.distributed._worker", scenario, str(r), str(world),
                               str(port), out], cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1.0, timeout - (time.monotonic() - t0)))[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0] + "\n<killed: timeout>")
    elapsed = time.monotonic() - t0
    results = []
    for r in range(world):
        try:
            with open(f"{out}.rank{r}.json") as f:
                results.append(json.load(f))
        except (OSError, ValueError):
            results.append(None)
    return results, elapsed, logs
